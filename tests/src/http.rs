//! The one way tests build an HTTP client.
//!
//! reqwest is built with rustls but without a crypto provider of its own (the workspace keeps
//! aws-lc's C build out of the tree), so a client can only be built once a provider is
//! installed for the process. [`client_builder`] installs ring first, which makes every
//! test's clients work whether or not the test speaks TLS.

/// A client builder that ignores proxy variables (tests talk to loopback and to the rig's own
/// hosts only), with ring installed as the process's TLS provider.
pub fn client_builder() -> reqwest::ClientBuilder {
    // Fails only when a provider is installed already, which serves as well.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy()
}

/// A client whose requests come from the loopback address 127.0.0.`n`, so that a test can
/// play several client hosts (the API caps and limits per client address).
pub fn client_from(n: u8, timeout: std::time::Duration) -> reqwest::Client {
    client_builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, n]))
        .timeout(timeout)
        .build()
        .expect("an HTTP client")
}
