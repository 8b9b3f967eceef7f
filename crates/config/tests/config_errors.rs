//! Bad site-config files and lookup failures: each error names the file, the line, the key and
//! the accepted values, and the lookup order (NCCL_DQPLB_CONF, /etc, embedded) is honoured.

use std::path::{Path, PathBuf};

use dqplb_config::{
    load_path, load_with, ConfigError, ConfigErrorKind, SiteConfig, EMBEDDED_ORIGIN,
};

/// Writes `text` to a fresh file under the temp dir and returns its path.
fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dqplb-config-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write temp file");
    path
}

fn load_err(name: &str, text: &str) -> (PathBuf, ConfigError, String) {
    let path = temp_file(name, text);
    match load_path(&path, &[]) {
        Ok(c) => panic!("{name} unexpectedly loaded: {c:?}"),
        Err(e) => {
            let shown = e.to_string();
            (path, e, shown)
        }
    }
}

fn assert_mentions(shown: &str, parts: &[&str]) {
    for part in parts {
        assert!(shown.contains(part), "'{part}' missing from: {shown}");
    }
}

#[test]
fn unknown_key_error_is_located() {
    let text = "[engine]\npolicy = \"dqplb\"\n\n[class.cross-dc]\nqps = 16\nmax-outstandng = 64\n";
    let (path, e, shown) = load_err("unknown.toml", text);
    assert_eq!(e.kind, ConfigErrorKind::UnknownKey);
    assert_eq!((e.line, e.column), (Some(6), Some(1)));
    let file = path.display().to_string();
    assert_mentions(
        &shown,
        &[
            &format!("{file}:6:1"),
            "class.cross-dc.max-outstandng",
            "max-outstanding",
            "rtt-us",
        ],
    );
}

#[test]
fn wrong_type_error_is_located() {
    let (path, e, shown) = load_err("type.toml", "[class.same-rail]\nqps = \"four\"\n");
    assert_eq!(e.kind, ConfigErrorKind::WrongType);
    assert_eq!(e.line, Some(2));
    assert_mentions(
        &shown,
        &[
            &format!("{}:2:7", path.display()),
            "class.same-rail.qps",
            "an integer in 1..=128",
        ],
    );
}

#[test]
fn out_of_range_error_is_located() {
    let text = "# site\n[engine]\nsegment-bytes = 5000\n";
    let (path, e, shown) = load_err("range.toml", text);
    assert_eq!(e.kind, ConfigErrorKind::OutOfRange);
    assert_mentions(
        &shown,
        &[
            &format!("{}:3:17", path.display()),
            "engine.segment-bytes",
            "5000 is not a multiple of 128",
            "a multiple of 128 in 4096..=67108864",
        ],
    );
    let (_, e, shown) = load_err("range2.toml", "[class.cross-dc]\nmax-outstanding = 300\n");
    assert_eq!((e.kind, e.line), (ConfigErrorKind::OutOfRange, Some(2)));
    assert_mentions(
        &shown,
        &["class.cross-dc.max-outstanding", "an integer in 1..=256"],
    );
    let (_, e, shown) = load_err("range3.toml", "[engine]\nmax-messages = 8\n");
    assert_eq!(e.line, Some(2));
    assert_mentions(&shown, &["engine.max-messages", "an integer in 32..=4096"]);
}

#[test]
fn bad_enum_and_section_errors_list_choices() {
    let (_, e, shown) = load_err("enum.toml", "[fabric]\nhca-third-field = \"rail\"\n");
    assert_eq!((e.kind, e.line), (ConfigErrorKind::WrongType, Some(2)));
    assert_mentions(
        &shown,
        &["fabric.hca-third-field", "\"fabric-id\"", "\"rail:plane\""],
    );
    let (_, e, shown) = load_err("section.toml", "[clas.cross-dc]\nqps = 4\n");
    assert_eq!((e.kind, e.line), (ConfigErrorKind::UnknownKey, Some(1)));
    assert_mentions(
        &shown,
        &[
            "'clas'",
            "fabric, engine, patterns, class, tcp, stats, log, dcqcn",
        ],
    );
}

#[test]
fn syntax_error_names_file_and_line() {
    let (path, e, shown) = load_err("syntax.toml", "[engine]\npolicy = dqplb\n");
    assert_eq!((e.kind, e.line), (ConfigErrorKind::Syntax, Some(2)));
    assert!(
        shown.starts_with(&format!("{}:2:", path.display())),
        "{shown}"
    );
}

#[test]
fn conf_variable_wins_and_unreadable_file_is_an_error() {
    let good = temp_file("conf-good.toml", "[engine]\nmax-messages = 48\n");
    let etc = temp_file("etc.toml", "[engine]\nmax-messages = 40\n");
    let good_str = good.display().to_string();
    let env = move |name: &str| (name == "NCCL_DQPLB_CONF").then(|| good_str.clone());
    let loaded = load_with(&env, &[], &etc).expect("loads");
    assert_eq!(loaded.config.engine.max_messages, 48);
    assert_eq!(loaded.source, good.display().to_string());

    let missing = good.with_file_name("no-such-file.toml");
    let missing_str = missing.display().to_string();
    let env = move |name: &str| (name == "NCCL_DQPLB_CONF").then(|| missing_str.clone());
    let e = load_with(&env, &[], &etc).expect_err("missing file is an error");
    assert_eq!(e.kind, ConfigErrorKind::Unreadable);
    let shown = e.to_string();
    assert_mentions(&shown, &[&missing.display().to_string(), "NCCL_DQPLB_CONF"]);

    // Empty is unset, as NCCL reads its variables: the system file applies.
    let env = |name: &str| (name == "NCCL_DQPLB_CONF").then(String::new);
    let loaded = load_with(&env, &[], &etc).expect("empty value is unset");
    assert_eq!(loaded.source, etc.display().to_string());
}

/// The config file is read only when it is a regular file of at most 1 MiB: a FIFO (which would
/// block), /dev/zero (endless), a directory or a larger file is refused at once, naming it.
#[test]
fn only_bounded_regular_files_are_read() {
    let dir = std::env::temp_dir().join(format!("dqplb-cfg-kinds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo.toml");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let big = dir.join("big.toml");
    std::fs::write(&big, format!("# {}\n", "x".repeat(1 << 20))).unwrap();
    let no_etc = dir.join("no-etc.toml");
    for (path, why) in [
        (fifo.clone(), "is a FIFO, not a regular file".to_string()),
        (
            "/dev/zero".into(),
            "is a character device, not a regular file".to_string(),
        ),
        (
            dir.clone(),
            "is a directory, not a regular file".to_string(),
        ),
        (
            big.clone(),
            "is 1048579 bytes, larger than the 1048576 bytes a config file may have".to_string(),
        ),
    ] {
        let p = path.display().to_string();
        let env = move |name: &str| (name == "NCCL_DQPLB_CONF").then(|| p.clone());
        let start = std::time::Instant::now();
        let e = load_with(&env, &[], &no_etc).expect_err("refused");
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(e.kind, ConfigErrorKind::Unreadable);
        assert_eq!(
            e.to_string(),
            format!(
                "{}: cannot read the config file named by NCCL_DQPLB_CONF: {why}",
                path.display()
            )
        );
        // The same rule for the system file.
        let e = load_with(&|_: &str| None, &[], &path).expect_err("refused as /etc file");
        assert!(e.to_string().ends_with(&why), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn etc_file_then_embedded_default() {
    let etc = temp_file("etc2.toml", "[engine]\nmax-messages = 40\n");
    let none = |_: &str| None;
    let loaded = load_with(&none, &[], &etc).expect("loads /etc stand-in");
    assert_eq!(loaded.config.engine.max_messages, 40);
    assert_eq!(loaded.source, etc.display().to_string());

    let absent = Path::new("/nonexistent-dqplb-dir/nccl-dqplb.toml");
    let loaded = load_with(&none, &[], absent).expect("embedded default");
    assert_eq!(loaded.source, EMBEDDED_ORIGIN);
    assert_eq!(loaded.config, SiteConfig::default());

    let bad_etc = temp_file("etc3.toml", "[tcp]\nnodelay = 1\n");
    let e = load_with(&none, &[], &bad_etc).expect_err("bad /etc file");
    assert_eq!((e.kind, e.line), (ConfigErrorKind::WrongType, Some(2)));
    assert_mentions(
        &e.to_string(),
        &[
            &bad_etc.display().to_string(),
            "tcp.nodelay",
            "true or false",
        ],
    );
}
