//! The repository's LICENSE is the Apache-2.0 text the manifests name, and CHANGELOG.md keeps
//! the Keep a Changelog layout (an Unreleased section above the released versions).

use std::path::PathBuf;

fn repo_file(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn license_is_the_apache_2_text_the_manifest_names() {
    let manifest = repo_file("Cargo.toml");
    assert!(manifest.contains("license = \"Apache-2.0\""));
    let text = repo_file("LICENSE");
    for needle in [
        "Apache License",
        "Version 2.0, January 2004",
        "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
        "9. Accepting Warranty or Additional Liability.",
        "END OF TERMS AND CONDITIONS",
    ] {
        assert!(text.contains(needle), "LICENSE lacks {needle:?}");
    }
}

#[test]
fn changelog_has_unreleased_above_the_first_release() {
    let text = repo_file("CHANGELOG.md");
    assert!(text.starts_with("# Changelog\n"));
    let unreleased = text
        .find("\n## [Unreleased]\n")
        .expect("Unreleased section");
    let first = text.find("\n## [0.1.0]\n").expect("0.1.0 section");
    assert!(unreleased < first);
    let version = repo_file("Cargo.toml");
    assert!(
        version.contains("version = \"0.1.0\""),
        "the workspace version"
    );
}
