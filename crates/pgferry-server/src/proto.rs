//! Generated from proto/pgferry/v1 by build.rs (tonic-build).

#![allow(clippy::all, clippy::pedantic, missing_docs)]

pub mod v1 {
    tonic::include_proto!("pgferry.v1");
}
