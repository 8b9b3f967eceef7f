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

/// The exit status line under `dqplb check --help`.
pub(crate) const EXIT: &str =
    "exit: 0 all match, 1 mismatch, 2 bad usage, 3 unverified (no mismatch, but checked values unreadable)";

/// How the report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Format {
    #[default]
    Table,
    Json,
}

/// `--dce-tcp-g`: how the model reads rp_dce_tcp_g.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum DceTcpG {
    /// g = (1024 - v) / 1024
    #[default]
    OneMinus,
    /// g = v / 1024
    Direct,
}

impl From<DceTcpG> for GConvention {
    fn from(c: DceTcpG) -> GConvention {
        match c {
            DceTcpG::OneMinus => GConvention::OneMinus,
            DceTcpG::Direct => GConvention::Direct,
        }
    }
}

/// `--alpha-update` (check and sim): when the DCQCN model updates alpha.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum AlphaUpdate {
    /// once per rp_dce_tcp_rtt (NVIDIA's documentation)
    #[default]
    PerPeriod,
    /// at each cut (the DCQCN paper)
    PerCnp,
}

impl From<AlphaUpdate> for AlphaSchedule {
    fn from(a: AlphaUpdate) -> AlphaSchedule {
        match a {
            AlphaUpdate::PerPeriod => AlphaSchedule::PerPeriod,
            AlphaUpdate::PerCnp => AlphaSchedule::PerCnp,
        }
    }
}

/// `--watch SECONDS`: a number of seconds in (0, 86400].
fn watch_seconds(v: &str) -> Result<f64, String> {
    let s: f64 = crate::units::num(v)?;
    if !(s.is_finite() && s > 0.0 && s <= 86_400.0) {
        return Err(format!("{v} must be in (0, 86400] seconds"));
    }
    Ok(s)
}

/// Options of `dqplb check`.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub(crate) struct CheckArgs {
    /// Site config (default: $NCCL_DQPLB_CONF, /etc/nccl-dqplb.toml, built-in)
    #[arg(long, value_name = "F")]
    config: Option<PathBuf>,
    /// Profile to check (default: [dcqcn].profile, else nvidia-default)
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Devices, NCCL_IB_HCA syntax (default: $NCCL_IB_HCA, else all found)
    #[arg(long, value_name = "STRING")]
    hca: Option<String>,
    /// Stands for /sys (a test tree mirrors the real paths below it)
    #[arg(long, value_name = "DIR")]
    sysfs_root: Option<PathBuf>,
    /// Stands for /sys/kernel/debug
    #[arg(long, value_name = "DIR")]
    debugfs_root: Option<PathBuf>,
    /// Output format
    #[arg(long, value_enum, value_name = "F", default_value_t)]
    format: Format,
    /// Print, without running them, the commands that fix drifted devices
    #[arg(long)]
    fix_commands: bool,
    /// After the report, print CNP / ECN-mark rates per second every SECONDS
    #[arg(long, value_name = "SECONDS", value_parser = watch_seconds, allow_negative_numbers = true)]
    watch: Option<f64>,
    /// Stop --watch after N samples (default: run until interrupted)
    #[arg(long, value_name = "N", requires = "watch",
          value_parser = crate::units::ranged(1u64, u64::MAX))]
    samples: Option<u64>,
    /// How the model reads rp_dce_tcp_g
    #[arg(long, value_enum, value_name = "C", default_value_t)]
    dce_tcp_g: DceTcpG,
    /// When the model updates alpha
    #[arg(long, value_enum, value_name = "S", default_value_t)]
    alpha_update: AlphaUpdate,
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
pub(crate) fn run(opts: &CheckArgs) -> i32 {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    run_to(opts, &mut stdout.lock(), &mut stderr.lock())
}

/// As [`run`], writing to the given streams.
fn run_to(opts: &CheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match check(opts, out, err) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "dqplb check: {e}");
            EXIT_USAGE
        }
    }
}

fn check(opts: &CheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<i32, String> {
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

    let convention = GConvention::from(opts.dce_tcp_g);
    let checked: Vec<CheckedDevice> = devices
        .iter()
        .map(|d| {
            analyse(
                compare(&read_device(&roots, d), &profile),
                convention,
                AlphaSchedule::from(opts.alpha_update),
            )
        })
        .collect();
    let worst = checked.iter().map(|c| c.report.verdict()).max();
    let code = match worst {
        Some(Verdict::Mismatch) => EXIT_MISMATCH,
        Some(Verdict::Unverified) => EXIT_UNVERIFIED,
        _ => EXIT_MATCH,
    };

    let text = if opts.fix_commands {
        let plans: Vec<_> = checked.iter().map(|c| fix_plan(&c.report)).collect();
        format_fix_plans(&plans)
    } else {
        match opts.format {
            Format::Json => format_json(&checked),
            Format::Table => format_table(&checked),
        }
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
    use crate::{parse, Cmd};
    use clap::error::ErrorKind;

    fn check_args(args: &[&str]) -> Result<CheckArgs, clap::Error> {
        let mut all = vec!["check"];
        all.extend(args);
        match parse(&all)? {
            Cmd::Check(a) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_flags_and_rejects_bad_ones() {
        let o = check_args(&[
            "--format=json",
            "--hca",
            "mlx5_0",
            "--watch",
            "0.5",
            "--samples",
            "2",
        ])
        .unwrap();
        assert_eq!(o.format, Format::Json);
        assert_eq!(o.hca.as_deref(), Some("mlx5_0"));
        assert_eq!((o.watch, o.samples), (Some(0.5), Some(2)));
        let d = check_args(&[]).unwrap();
        assert_eq!(
            (d.format, d.dce_tcp_g, d.alpha_update, d.fix_commands),
            (
                Format::Table,
                DceTcpG::OneMinus,
                AlphaUpdate::PerPeriod,
                false
            )
        );
        let kind = |args: &[&str]| check_args(args).unwrap_err().kind();
        assert_eq!(kind(&["--format", "xml"]), ErrorKind::InvalidValue);
        assert_eq!(kind(&["--profile"]), ErrorKind::InvalidValue);
        assert_eq!(kind(&["--bogus"]), ErrorKind::UnknownArgument);
        assert_eq!(kind(&["--watch", "-1"]), ErrorKind::ValueValidation);
        assert_eq!(kind(&["--watch", "86401"]), ErrorKind::ValueValidation);
        assert_eq!(
            kind(&["--samples", "0", "--watch", "1"]),
            ErrorKind::ValueValidation
        );
        assert_eq!(
            kind(&["--samples", "3"]),
            ErrorKind::MissingRequiredArgument
        );
        assert_eq!(kind(&["--fix-commands=yes"]), ErrorKind::TooManyValues);
        assert_eq!(kind(&["--dce-tcp-g", "inverse"]), ErrorKind::InvalidValue);
        assert_eq!(
            kind(&["--alpha-update", "per-rtt"]),
            ErrorKind::InvalidValue
        );
        let e = check_args(&["--watch", "-1"]).unwrap_err().to_string();
        assert!(e.contains("-1 must be in (0, 86400] seconds"), "{e}");
    }
}
