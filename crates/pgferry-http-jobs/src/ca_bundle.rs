//! A CA bundle file (`pgferry serve --http-jobs-ca-bundle`): PEM certificates trusted for
//! HTTPS destinations besides the public web roots (a private CA, a self-signed test
//! server). Read and checked once at startup, so a wrong path or a file without a usable
//! certificate stops the server with an error naming the file, not at the first attempt.

use std::path::{Path, PathBuf};

const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
const END: &str = "-----END CERTIFICATE-----";

#[derive(Debug, thiserror::Error)]
pub enum CaBundleError {
    #[error("cannot read the CA bundle {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the CA bundle {path} holds no PEM certificate ({BEGIN} ... {END})")]
    Empty { path: PathBuf },
    #[error("certificate {index} of the CA bundle {path} is not valid: {reason}")]
    Invalid {
        path: PathBuf,
        /// 1-based, in file order.
        index: usize,
        reason: String,
    },
}

/// The certificates of the bundle at `path`, one PEM block each (for
/// `ExecutorConfig::root_certs_pem`), each checked to parse.
pub fn load(path: &Path) -> Result<Vec<Vec<u8>>, CaBundleError> {
    let text = std::fs::read_to_string(path).map_err(|source| CaBundleError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut certs = Vec::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find(BEGIN) {
        let index = certs.len() + 1;
        let invalid = |reason: &str| CaBundleError::Invalid {
            path: path.to_path_buf(),
            index,
            reason: reason.to_string(),
        };
        let after = &rest[start..];
        let end = after
            .find(END)
            .ok_or_else(|| invalid("no END CERTIFICATE line"))?;
        let pem = format!("{}\n", &after[..end + END.len()]);
        // Taken the way the executor will take it: a client trusting it must build (the
        // certificate's DER is parsed into a root store there), so a damaged block fails now.
        let cert =
            reqwest::Certificate::from_pem(pem.as_bytes()).map_err(|e| invalid(&e.to_string()))?;
        reqwest::Client::builder()
            .add_root_certificate(cert)
            .build()
            .map_err(|e| invalid(&e.to_string()))?;
        certs.push(pem.into_bytes());
        rest = &after[end + END.len()..];
    }
    if certs.is_empty() {
        return Err(CaBundleError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}
