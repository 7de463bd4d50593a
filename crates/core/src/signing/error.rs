//! Why a key was refused. Each message says what the key is and what to give instead; none
//! carries a byte of the key or its password (the causes kept are the parsers' own, which name
//! positions and kinds, never contents).

/// Why a private or public key could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("it is not a PEM key ({0}): give the key file as `cosign generate-key-pair` or openssl writes it")]
    NotPem(String),
    #[error(
        "its PEM type \"{0}\" is not a private key this reads: give cosign's encrypted key (ENCRYPTED SIGSTORE PRIVATE KEY or ENCRYPTED COSIGN PRIVATE KEY) or an unencrypted ECDSA P-256 key (PRIVATE KEY, EC PRIVATE KEY)"
    )]
    UnknownPemType(String),
    #[error(
        "it is a public key (PEM type \"{0}\"), not a private key: give the private key (cosign.key) here and the public key to trusted_keys"
    )]
    PublicKey(String),
    #[error(
        "its PEM type \"{0}\" is not a public key: give the PUBLIC KEY PEM (cosign.pub, or what `builder-monitor signing public-key` prints)"
    )]
    NotPublicKey(String),
    #[error(
        "it is an ECDSA key on the curve {0}; only P-256 is supported (cosign's keys and the admission policies checking them): make a P-256 key, e.g. with `cosign generate-key-pair`"
    )]
    OtherCurve(String),
    #[error(
        "it is an {0} key; only ECDSA P-256 keys are supported (cosign's default): make one, e.g. with `cosign generate-key-pair`"
    )]
    OtherKind(String),
    #[error("it is encrypted: set password_env to the variable holding its password (cosign.password)")]
    NeedsPassword,
    #[error("the password does not decrypt it: give the password the key was made with (cosign.password)")]
    WrongPassword,
    #[error("it is not a valid {what}: {why}")]
    Malformed { what: &'static str, why: String },
}

impl KeyError {
    pub(super) fn malformed(what: &'static str) -> impl FnOnce(String) -> KeyError {
        move |why| KeyError::Malformed { what, why }
    }
}
