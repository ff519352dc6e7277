//! The pure tier of these tests (docs/testing.md).

use super::*;

/// The example of docs/configuration.md's "Configuration reference": the first ```toml block
/// under that heading parses, with a driver and a platform-limited device.
#[test]
fn configuration_reference_example_is_valid() {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md"),
    )
    .unwrap();
    let section = doc
        .split("\n## ")
        .find(|section| section.starts_with("Configuration reference\n"))
        .expect("a ## Configuration reference in docs/configuration.md");
    let start = section
        .find("```toml\n")
        .expect("a toml block in docs/configuration.md's Configuration reference")
        + 8;
    let end = start + section[start..].find("```").unwrap();
    let config =
        cuda_sandbox_hook::config::Config::parse(&section[start..end], "docs/configuration.md")
            .unwrap_or_else(|e| panic!("docs/configuration.md's config example is invalid: {e}"));
    assert!(config.rules[0].driver.is_some());
    assert!(config.rules[0].devices.iter().any(|d| d.platform.is_some()));
}
