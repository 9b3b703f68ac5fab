//! Compiles the protocol contract (proto/pgferry/v1) into Rust with tonic-build. Server
//! stubs only; pgferry-client generates its own client stubs from the same files.
//! Needs `protoc` (scripts/setup.sh installs protobuf-compiler); PROTOC overrides the path.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read when the script runs, not baked in when it is compiled: cargo reuses a compiled
    // build script across checkouts that share a target directory (a CI clone and a
    // worktree), and a baked path would point at the checkout it was first built in.
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files: Vec<_> = [
        "common",
        "producer",
        "worker",
        "admin",
        "workflow",
        "ash",
        "scheduler",
    ]
    .iter()
    .map(|f| root.join(format!("pgferry/v1/{f}.proto")))
    .collect();
    tonic_build::configure()
        .build_client(false)
        .build_server(true)
        // Undecodable messages are INVALID_ARGUMENT, not INTERNAL (src/grpc/codec.rs).
        .codec_path("crate::grpc::codec::ServerCodec")
        .compile_protos(&files, std::slice::from_ref(&root))?;
    println!("cargo:rerun-if-changed={}", root.display());
    Ok(())
}
