//! `dqplb check`: compares every selected RDMA device with a DCQCN profile, prints a table or
//! JSON (plus counters and the model's reading), fix commands or counter rates; exit 0/1/2/3.

use crate::check_report::{analyse, format_json, format_table, CheckedDevice};
use dqplb_config::load::{load_from_process_env, load_path, process_env_vars};
use dqplb_config::schema::SiteConfig;
use dqplb_dcqcn::compare::{compare, Verdict};
use dqplb_dcqcn::fix::{fix_plan, format_fix_plans};
use dqplb_dcqcn::model::{AlphaSchedule, GConvention};
use dqplb_dcqcn::profile::resolve;
use dqplb_dcqcn::reader::{list_devices, read_device, Roots};
use dqplb_dcqcn::select::select_devices;
use dqplb_dcqcn::watch::watch;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Exit code: every checked value matches.
pub(crate) const EXIT_MATCH: i32 = 0;
/// Exit code: at least one mismatch (or garbage in a checked file).
pub(crate) const EXIT_MISMATCH: i32 = 1;
/// Exit code: bad usage (arguments, config, profile, no device).
pub(crate) const EXIT_USAGE: i32 = 2;
/// No mismatch, but checked values were unreadable (no debugfs, not root): not proof of a match.
pub(crate) const EXIT_UNVERIFIED: i32 = 3;

pub(crate) const USAGE: &str = "\
usage: dqplb check [--config F] [--profile NAME] [--hca STRING] [--sysfs-root DIR]
                   [--debugfs-root DIR] [--format table|json] [--fix-commands]
                   [--watch SECONDS [--samples N]] [--dce-tcp-g one-minus|direct]
                   [--alpha-update per-period|per-cnp]
  --config F          site config (default: $NCCL_DQPLB_CONF, /etc/nccl-dqplb.toml, built-in)
  --profile NAME      profile to check (default: [dcqcn].profile, else nvidia-default)
  --hca STRING        devices, NCCL_IB_HCA syntax (default: $NCCL_IB_HCA, else all found)
  --sysfs-root DIR    stands for /sys (a test tree mirrors the real paths below it)
  --debugfs-root DIR  stands for /sys/kernel/debug
  --format F          table (default) or json
  --fix-commands      print, without running them, the commands that fix drifted devices
  --watch SECONDS     after the report, print CNP / ECN-mark rates per second every SECONDS
  --samples N         stop --watch after N samples (default: run until interrupted)
  --dce-tcp-g C       how the model reads rp_dce_tcp_g: one-minus (g=(1024-v)/1024, default)
                      or direct (g=v/1024)
  --alpha-update S    when the model updates alpha: per-period (once per rp_dce_tcp_rtt, NVIDIA's
                      documentation, default) or per-cnp (at each cut, the DCQCN paper's)
exit: 0 all match, 1 mismatch, 2 bad usage, 3 unverified (no mismatch, but checked values unreadable)";

#[derive(Debug, Default)]
struct Options {
    config: Option<PathBuf>,
    profile: Option<String>,
    hca: Option<String>,
    sysfs_root: Option<PathBuf>,
    debugfs_root: Option<PathBuf>,
    json: bool,
    fix: bool,
    watch: Option<f64>,
    samples: Option<u64>,
    convention: Option<GConvention>,
    alpha: Option<AlphaSchedule>,
    help: bool,
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg, None),
        };
        let takes_value = matches!(
            flag,
            "--config"
                | "--profile"
                | "--hca"
                | "--sysfs-root"
                | "--debugfs-root"
                | "--format"
                | "--watch"
                | "--samples"
                | "--dce-tcp-g"
                | "--alpha-update"
        );
        let value = if takes_value {
            match inline {
                Some(v) => v,
                None => {
                    i += 1;
                    args.get(i)
                        .cloned()
                        .ok_or_else(|| format!("{flag} needs a value"))?
                }
            }
        } else {
            if inline.is_some() {
                return Err(format!("{flag} takes no value"));
            }
            String::new()
        };
        match flag {
            "--config" => o.config = Some(PathBuf::from(value)),
            "--profile" => o.profile = Some(value),
            "--hca" => o.hca = Some(value),
            "--sysfs-root" => o.sysfs_root = Some(PathBuf::from(value)),
            "--debugfs-root" => o.debugfs_root = Some(PathBuf::from(value)),
            "--format" => {
                o.json = match value.as_str() {
                    "table" => false,
                    "json" => true,
                    other => return Err(format!("--format: \"{other}\" is not table or json")),
                }
            }
            "--watch" => {
                let s: f64 = value
                    .parse()
                    .map_err(|_| format!("--watch: \"{value}\" is not a number of seconds"))?;
                if !(s.is_finite() && s > 0.0 && s <= 86_400.0) {
                    return Err(format!("--watch: {value} must be in (0, 86400] seconds"));
                }
                o.watch = Some(s);
            }
            "--samples" => {
                let n: u64 = value
                    .parse()
                    .map_err(|_| format!("--samples: \"{value}\" is not a count"))?;
                if n == 0 {
                    return Err("--samples must be at least 1".to_string());
                }
                o.samples = Some(n);
            }
            "--dce-tcp-g" => {
                o.convention = Some(match value.as_str() {
                    "one-minus" => GConvention::OneMinus,
                    "direct" => GConvention::Direct,
                    other => {
                        return Err(format!(
                            "--dce-tcp-g: \"{other}\" is not one-minus or direct"
                        ))
                    }
                })
            }
            "--alpha-update" => {
                o.alpha = Some(AlphaSchedule::parse(&value).ok_or_else(|| {
                    format!("--alpha-update: \"{value}\" is not per-period or per-cnp")
                })?)
            }
            "--fix-commands" => o.fix = true,
            "-h" | "--help" => o.help = true,
            other => return Err(format!("unknown argument \"{other}\"")),
        }
        i += 1;
    }
    if o.samples.is_some() && o.watch.is_none() {
        return Err("--samples needs --watch".to_string());
    }
    Ok(o)
}

/// The site config in effect: `--config F`, else the plugin's lookup order (NCCL_DQPLB_CONF,
/// /etc/nccl-dqplb.toml, embedded default), with NCCL_DQPLB_* overrides applied.
fn load_config(path: &Option<PathBuf>) -> Result<SiteConfig, String> {
    let loaded = match path {
        Some(p) => load_path(p, &process_env_vars()),
        None => load_from_process_env(),
    };
    loaded.map(|l| l.config).map_err(|e| e.to_string())
}

/// `dqplb check ARGS`; returns the exit code.
pub(crate) fn run(args: &[String]) -> i32 {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    run_to(args, &mut stdout.lock(), &mut stderr.lock())
}

/// As [`run`], writing to the given streams (tests use buffers).
pub(crate) fn run_to(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let opts = match parse_args(args) {
        Ok(o) => o,
        Err(e) => {
            let _ = writeln!(err, "dqplb check: {e}\n{USAGE}");
            return EXIT_USAGE;
        }
    };
    if opts.help {
        let _ = writeln!(out, "{USAGE}");
        return EXIT_MATCH;
    }
    match check(&opts, out, err) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "dqplb check: {e}");
            EXIT_USAGE
        }
    }
}

fn check(opts: &Options, out: &mut dyn Write, err: &mut dyn Write) -> Result<i32, String> {
    let config = load_config(&opts.config)?;
    let mut section = config.dcqcn.clone();
    if let Some(p) = &opts.profile {
        section.profile = p.clone();
    }
    if let Some(r) = &opts.sysfs_root {
        section.sysfs_root = Some(r.clone());
    }
    if let Some(r) = &opts.debugfs_root {
        section.debugfs_root = Some(r.clone());
    }
    let roots = Roots::from_section(&section);
    let profile = resolve(&section, &section.profile).map_err(|e| e.to_string())?;

    let env_hca = std::env::var("NCCL_IB_HCA").ok();
    let hca = opts.hca.clone().or(env_hca);
    if let Some(h) = hca.as_deref().map(str::trim).filter(|h| !h.is_empty()) {
        // Operators get every oddity as an error; the plugin reads the same list leniently.
        dqplb_config::HcaList::parse(h, config.fabric.hca_third_field, config.fabric.max_rails)
            .map_err(|e| e.to_string())?;
    }
    let all = list_devices(&roots).map_err(|e| format!("no RDMA devices: {e}"))?;
    let devices = select_devices(all.clone(), hca.as_deref(), &config.fabric)?;
    if devices.is_empty() {
        return Err(match hca {
            Some(h) => format!("HCA list \"{h}\" selects none of: {}", all.join(", ")),
            None => format!("no RDMA device under {}", roots.infiniband().display()),
        });
    }

    let convention = opts.convention.unwrap_or(GConvention::OneMinus);
    let checked: Vec<CheckedDevice> = devices
        .iter()
        .map(|d| {
            analyse(
                compare(&read_device(&roots, d), &profile),
                convention,
                opts.alpha.unwrap_or(AlphaSchedule::PerPeriod),
            )
        })
        .collect();
    let worst = checked.iter().map(|c| c.report.verdict()).max();
    let code = match worst {
        Some(Verdict::Mismatch) => EXIT_MISMATCH,
        Some(Verdict::Unverified) => EXIT_UNVERIFIED,
        _ => EXIT_MATCH,
    };

    let text = if opts.fix {
        let plans: Vec<_> = checked.iter().map(|c| fix_plan(&c.report)).collect();
        format_fix_plans(&plans)
    } else if opts.json {
        format_json(&checked)
    } else {
        format_table(&checked)
    };
    out.write_all(text.as_bytes())
        .map_err(|e| format!("writing output: {e}"))?;

    if let Some(secs) = opts.watch {
        let _ = writeln!(err, "watching congestion counters every {secs} s");
        watch(
            &roots,
            &devices,
            Duration::from_secs_f64(secs),
            opts.samples,
            out,
        )
        .map_err(|e| format!("watch: {e}"))?;
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_flags_and_rejects_bad_ones() {
        let o = parse_args(&a(&[
            "--format=json",
            "--hca",
            "mlx5_0",
            "--watch",
            "0.5",
            "--samples",
            "2",
        ]))
        .unwrap();
        assert!(o.json);
        assert_eq!(o.hca.as_deref(), Some("mlx5_0"));
        assert_eq!((o.watch, o.samples), (Some(0.5), Some(2)));
        assert!(parse_args(&a(&["--format", "xml"]))
            .unwrap_err()
            .contains("xml"));
        assert!(parse_args(&a(&["--profile"]))
            .unwrap_err()
            .contains("needs a value"));
        assert!(parse_args(&a(&["--bogus"]))
            .unwrap_err()
            .contains("--bogus"));
        assert!(parse_args(&a(&["--watch", "-1"])).is_err());
        assert!(parse_args(&a(&["--samples", "3"]))
            .unwrap_err()
            .contains("--watch"));
        assert!(parse_args(&a(&["--fix-commands=yes"])).is_err());
    }
}
