//! Compiles the protocol contract (proto/pgferry/v1) into client stubs. Needs `protoc`
//! (scripts/setup.sh installs protobuf-compiler); PROTOC overrides the path.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
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
        .build_client(true)
        .build_server(false)
        .compile_protos(&files, std::slice::from_ref(&root))?;
    println!("cargo:rerun-if-changed={}", root.display());
    Ok(())
}
