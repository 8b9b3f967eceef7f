//! Logging: a tracing layer that forwards events to NCCL's logger (WARN/INFO/TRACE, NET|INIT), and
//! the standalone stderr subscriber (no ANSI) used by the CLI and tests; both honour NCCL_DEBUG.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, RwLock};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
pub use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// NCCL log levels (ncclDebugLogLevel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NcclLevel {
    Warn = 2,
    Info = 3,
    Trace = 5,
}

/// NCCL subsystem bits used by this plugin.
pub(crate) const SUBSYS_INIT: u64 = 1;
pub(crate) const SUBSYS_NET: u64 = 16;

/// The prefix of every line, in the manner of NCCL's own transports ("NET/IB : ...").
pub const PREFIX: &str = "NET/DQPLB : ";

/// One line for NCCL's logger: level, subsystem flags, the Rust source file and line of the call
/// site (NCCL prints them with each WARN), and the text after NCCL's own prefix.
#[derive(Debug, Clone, Copy)]
pub struct Line<'a> {
    pub level: NcclLevel,
    pub flags: u64,
    pub file: &'static str,
    pub line: u32,
    pub msg: &'a str,
}

/// Where formatted log lines go: the ffi layer wraps NCCL's C logger in one of these.
pub type Sink = Arc<dyn Fn(&Line<'_>) + Send + Sync>;

static SINK: RwLock<Option<Sink>> = RwLock::new(None);
/// Most verbose tracing level forwarded to NCCL: 0 off, 1 warn, 2 info, 3 trace.
static LEVEL: AtomicU8 = AtomicU8::new(1);

fn level_rank(l: &Level) -> u8 {
    match *l {
        Level::ERROR | Level::WARN => 1,
        Level::INFO => 2,
        Level::DEBUG | Level::TRACE => 3,
    }
}

/// Changes what reaches NCCL's logger (e.g. after the site config's `log.level` was read).
pub(crate) fn set_level(level: LevelFilter) {
    let rank = match level {
        LevelFilter::OFF => 0,
        LevelFilter::ERROR | LevelFilter::WARN => 1,
        LevelFilter::INFO => 2,
        _ => 3,
    };
    LEVEL.store(rank, Ordering::Relaxed);
}

/// Whether TRACE lines reach NCCL's logger (NCCL_DEBUG=TRACE or `log.level = "trace"`): lets a
/// caller skip building detail lines nobody will see.
pub(crate) fn trace_on() -> bool {
    LEVEL.load(Ordering::Relaxed) >= 3
}

/// Installs (or replaces, after a re-init) NCCL's logger.
pub fn set_sink(sink: Option<Sink>) {
    if let Ok(mut s) = SINK.write() {
        *s = sink;
    }
}

/// Level filter from NCCL_DEBUG (VERSION/WARN -> warn, INFO -> info, TRACE -> trace, unset -> warn).
pub(crate) fn level_from_nccl_debug(v: Option<&str>) -> LevelFilter {
    match v.map(|s| s.trim().to_ascii_uppercase()).as_deref() {
        Some("TRACE") => LevelFilter::TRACE,
        Some("INFO") => LevelFilter::INFO,
        Some("NONE") => LevelFilter::OFF,
        _ => LevelFilter::WARN,
    }
}

fn nccl_level(l: &Level) -> NcclLevel {
    match *l {
        Level::ERROR | Level::WARN => NcclLevel::Warn,
        Level::INFO => NcclLevel::Info,
        Level::DEBUG | Level::TRACE => NcclLevel::Trace,
    }
}

/// Subsystem bits from the event target: init/config/dcqcn -> INIT|NET, the rest NET.
fn subsys(target: &str) -> u64 {
    if target.contains("init") || target.contains("config") || target.contains("dcqcn") {
        SUBSYS_INIT | SUBSYS_NET
    } else {
        SUBSYS_NET
    }
}

struct MessageVisitor<'a>(&'a mut String);

impl Visit for MessageVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

/// Formats one event as the line NCCL prints after its own prefix.
pub(crate) fn format_event(event: &Event<'_>) -> String {
    let mut line = String::from(PREFIX);
    event.record(&mut MessageVisitor(&mut line));
    line
}

/// tracing -> NCCL logger bridge.
pub(crate) struct NcclLayer;

impl<S: Subscriber> Layer<S> for NcclLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if level_rank(event.metadata().level()) > LEVEL.load(Ordering::Relaxed) {
            return;
        }
        let Ok(guard) = SINK.read() else { return };
        if let Some(sink) = guard.as_ref() {
            let meta = event.metadata();
            sink(&Line {
                level: nccl_level(meta.level()),
                flags: subsys(meta.target()),
                file: meta.file().unwrap_or("dqplb"),
                line: meta.line().unwrap_or(0),
                msg: &format_event(event),
            });
        }
    }
}

/// Installs the NCCL bridge as the process-wide subscriber (once; later calls only swap the sink).
/// If the host process already has a global subscriber, our events go to it instead.
pub(crate) fn install_nccl_bridge(sink: Option<Sink>, level: LevelFilter) {
    set_sink(sink);
    set_level(level);
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let sub = tracing_subscriber::registry().with(NcclLayer);
        let _ = tracing::subscriber::set_global_default(sub);
    });
}

/// Standalone (CLI, tests): plain stderr lines without ANSI colours, level from NCCL_DEBUG.
pub fn install_stderr() {
    let level = level_from_nccl_debug(std::env::var("NCCL_DEBUG").ok().as_deref());
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_filter(level);
    let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(fmt));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_debug_levels() {
        assert_eq!(level_from_nccl_debug(None), LevelFilter::WARN);
        assert_eq!(level_from_nccl_debug(Some("info")), LevelFilter::INFO);
        assert_eq!(level_from_nccl_debug(Some("TRACE")), LevelFilter::TRACE);
        assert_eq!(level_from_nccl_debug(Some("VERSION")), LevelFilter::WARN);
        assert_eq!(level_from_nccl_debug(Some("NONE")), LevelFilter::OFF);
    }

    #[test]
    fn subsystems_by_target() {
        assert_eq!(subsys("dqplb::init"), SUBSYS_INIT | SUBSYS_NET);
        assert_eq!(subsys("dqplb::net"), SUBSYS_NET);
    }

    #[test]
    fn events_reach_the_sink_with_level_and_text() {
        let seen: Arc<std::sync::Mutex<Vec<(NcclLevel, u64, String)>>> = Arc::default();
        let s2 = seen.clone();
        let sink: Sink = Arc::new(move |l: &Line<'_>| {
            s2.lock()
                .unwrap()
                .push((l.level, l.flags, format!("{}:{} {}", l.file, l.line, l.msg)))
        });
        set_sink(Some(sink));
        set_level(LevelFilter::INFO);
        let sub = tracing_subscriber::registry().with(NcclLayer);
        tracing::subscriber::with_default(sub, || {
            tracing::warn!(target: "dqplb::init", peer = 3, "bad thing");
            tracing::info!(target: "dqplb::net", "hello");
            tracing::trace!(target: "dqplb::net", "too verbose for INFO");
        });
        set_sink(None);
        let got = seen.lock().unwrap().clone();
        let ours: Vec<_> = got
            .iter()
            .filter(|(_, _, m)| m.contains("bad thing") || m.contains("hello"))
            .collect();
        assert_eq!(ours.len(), 2, "{got:?}");
        assert_eq!(ours[0].0, NcclLevel::Warn);
        assert_eq!(ours[0].1, SUBSYS_INIT | SUBSYS_NET);
        // The call site's file and line, for NCCL's "file:line NCCL WARN".
        let warn_line = line!() - 14;
        assert_eq!(
            ours[0].2,
            format!("src/plugin/log.rs:{warn_line} NET/DQPLB : bad thing peer=3")
        );
        assert_eq!(ours[1].0, NcclLevel::Info);
        assert_eq!(
            ours[1].2,
            format!("src/plugin/log.rs:{} NET/DQPLB : hello", warn_line + 1)
        );
    }
}
