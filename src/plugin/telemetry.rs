//! Per-QP telemetry without a thread: send comms publish their engine counters into a process
//! registry from NCCL's own calls, at most once per interval, and the stats file is rewritten from it.
//! A closing comm rewrites it at once; the last one to close removes it (and the textfile), and
//! so does the last communicator's finalize (v11+) with comms still open.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use dqplb_config::StatsSection;
use dqplb_engine::QpStats;

/// One data QP's counters as the stats file holds them (times in nanoseconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct QpEntry {
    pub qp: u32,
    pub segments: u64,
    pub bytes: u64,
    pub completed: u64,
    pub outstanding: u32,
    pub peak_outstanding: u32,
    pub latency_ewma_ns: f64,
    /// Bucket 0: latency 0; bucket k >= 1: [2^(k-1), 2^k) ns; the last: everything above.
    pub latency_log2_ns: Vec<u64>,
    pub resent: u64,
    pub rehashes: u64,
    pub failures: u64,
}

impl QpEntry {
    fn set(&mut self, qp: usize, s: &QpStats) {
        self.qp = qp as u32;
        self.segments = s.segments;
        self.bytes = s.bytes;
        self.completed = s.completed;
        self.outstanding = s.outstanding;
        self.peak_outstanding = s.peak_outstanding;
        self.latency_ewma_ns = s.latency_ewma;
        self.latency_log2_ns.clear();
        self.latency_log2_ns.extend_from_slice(&s.latency_log2);
        self.resent = s.resent;
        self.rehashes = s.rehashes;
        self.failures = s.failures;
    }
}

/// One send connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CommEntry {
    /// Process-unique connection number.
    pub id: u64,
    pub dev: i32,
    pub transport: String,
    pub peer: String,
    pub class: String,
    pub qps: Vec<QpEntry>,
}

/// The whole stats file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StatsFile {
    pub pid: u32,
    pub host: String,
    pub written_unix_ms: u64,
    #[serde(default)]
    pub comms: Vec<CommEntry>,
}

type Slot = Mutex<CommEntry>;

static REGISTRY: Mutex<Vec<Weak<Slot>>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Nanoseconds since `epoch()` before which nobody rewrites the file.
static NEXT_WRITE: AtomicU64 = AtomicU64::new(0);
/// Every stats file and textfile path a comm of this process may write, for `remove_files`.
static PATHS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Set by `remove_files`: comms left open write no file until a new comm is made.
static FINALIZED: AtomicBool = AtomicBool::new(false);

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// `template` with `%p` = process id and `%h` = host name.
pub fn expand_path(template: &str) -> PathBuf {
    PathBuf::from(
        template
            .replace("%p", &std::process::id().to_string())
            .replace("%h", &host_name()),
    )
}

/// Where and how the node exporter textfile is written.
#[derive(Debug, Clone)]
struct Textfile {
    /// `<dir>/dqplb_<pid>.prom`.
    path: PathBuf,
    labels: super::prometheus::Labels,
}

/// A send comm's telemetry: None when neither a file nor periodic logging is configured (one
/// branch per call then).
#[derive(Debug)]
pub(crate) struct CommTelemetry {
    slot: Arc<Slot>,
    file: Option<PathBuf>,
    textfile: Option<Textfile>,
    file_every: u64,
    log_every: u64,
    next_publish: u64,
    next_log: u64,
}

impl CommTelemetry {
    /// The telemetry `cfg` asks for, for a connection with `qps` data QPs.
    pub(crate) fn new(
        cfg: &StatsSection,
        dev: i32,
        transport: &str,
        peer: String,
        class: &str,
        qps: usize,
    ) -> Option<CommTelemetry> {
        let file = (!cfg.file.is_empty()).then(|| expand_path(&cfg.file));
        let textfile = (!cfg.textfile_dir.is_empty()).then(|| Textfile {
            path: textfile_path(Path::new(&cfg.textfile_dir)),
            labels: super::prometheus::Labels {
                pid: cfg.textfile_pid_peer,
                comm: false,
                peer: cfg.textfile_pid_peer,
            },
        });
        if file.is_none() && textfile.is_none() && cfg.log_interval_ms == 0 {
            return None;
        }
        let blank = QpEntry {
            qp: 0,
            segments: 0,
            bytes: 0,
            completed: 0,
            outstanding: 0,
            peak_outstanding: 0,
            latency_ewma_ns: 0.0,
            latency_log2_ns: Vec::with_capacity(dqplb_engine::LATENCY_BUCKETS),
            resent: 0,
            rehashes: 0,
            failures: 0,
        };
        let slot = Arc::new(Mutex::new(CommEntry {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            dev,
            transport: transport.to_string(),
            peer,
            class: class.to_string(),
            qps: vec![blank; qps],
        }));
        lock(&REGISTRY).push(Arc::downgrade(&slot));
        {
            let mut paths = lock(&PATHS);
            FINALIZED.store(false, Ordering::Release);
            for p in file.iter().chain(textfile.iter().map(|t| &t.path)) {
                if !paths.contains(p) {
                    paths.push(p.clone());
                }
            }
        }
        Some(CommTelemetry {
            slot,
            file,
            textfile,
            file_every: cfg.file_interval_ms.max(1000) * 1_000_000,
            log_every: cfg.log_interval_ms * 1_000_000,
            next_publish: 0,
            next_log: cfg.log_interval_ms * 1_000_000,
        })
    }

    /// Called from the comm's isend/test: publishes `stats`, logs and rewrites the file when due.
    pub(crate) fn tick(&mut self, stats: &[QpStats]) {
        let now = epoch().elapsed().as_nanos() as u64;
        self.tick_at(now, stats);
    }

    /// `tick` at `now` (ns since the process's telemetry epoch).
    pub(crate) fn tick_at(&mut self, now: u64, stats: &[QpStats]) {
        if now < self.next_publish {
            return;
        }
        let mut every = u64::MAX;
        if self.file.is_some() || self.textfile.is_some() {
            every = every.min(self.file_every);
        }
        if self.log_every > 0 {
            every = every.min(self.log_every);
        }
        self.next_publish = now.saturating_add(every);
        {
            let mut e = lock(&self.slot);
            for (q, s) in stats.iter().enumerate() {
                if let Some(entry) = e.qps.get_mut(q) {
                    entry.set(q, s);
                }
            }
        }
        if self.log_every > 0 && now >= self.next_log {
            self.next_log = now.saturating_add(self.log_every);
            let e = lock(&self.slot);
            for q in &e.qps {
                tracing::info!(target: "dqplb::stats", "send comm {} to {} (dev {}, {}): QP {}: {} segments, {} bytes, {} completed, {} outstanding (peak {}), latency EWMA {:.0} ns, {} resent, {} re-hashes, {} failures",
                    e.id, e.peer, e.dev, e.class, q.qp, q.segments, q.bytes, q.completed, q.outstanding, q.peak_outstanding, q.latency_ewma_ns, q.resent, q.rehashes, q.failures);
            }
        }
        if self.file.is_some() || self.textfile.is_some() {
            let due = NEXT_WRITE.load(Ordering::Relaxed);
            if now >= due
                && NEXT_WRITE
                    .compare_exchange(
                        due,
                        now + self.file_every,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                self.write();
            }
        }
    }

    /// Rewrites the stats file and the textfile from the registry (not after `remove_files`);
    /// failures are logged.
    fn write(&self) {
        if FINALIZED.load(Ordering::Acquire) {
            return;
        }
        if let Some(path) = &self.file {
            if let Err(e) = write_file(path) {
                tracing::warn!(target: "dqplb::stats", "stats file {}: {e}", path.display());
            }
        }
        if let Some(t) = &self.textfile {
            let text = super::prometheus::render(&[snapshot()], t.labels);
            if let Err(e) = write_atomically(&t.path, &text) {
                tracing::warn!(target: "dqplb::stats", "textfile {}: {e}", t.path.display());
            }
        }
    }

    /// The comm closes with `stats`: its final counters are published and the files rewritten at
    /// once; when it was the process's last live send comm, the files are removed instead.
    pub(crate) fn close(self, stats: &[QpStats]) {
        {
            let mut e = lock(&self.slot);
            for (q, s) in stats.iter().enumerate() {
                if let Some(entry) = e.qps.get_mut(q) {
                    entry.set(q, s);
                }
            }
        }
        if self.file.is_none() && self.textfile.is_none() {
            return;
        }
        let others = lock(&REGISTRY)
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|s| !Arc::ptr_eq(s, &self.slot))
            .count();
        if others > 0 {
            self.write();
            return;
        }
        let paths = self
            .file
            .iter()
            .chain(self.textfile.iter().map(|t| &t.path));
        for path in paths {
            remove(path);
        }
    }

    #[cfg(test)]
    /// The connection's number in the stats file.
    pub(crate) fn id(&self) -> u64 {
        lock(&self.slot).id
    }
}

/// Removes `path`; a missing file is fine, another failure is logged.
fn remove(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(target: "dqplb::stats", "removing {}: {e}", path.display()),
    }
}

/// The process is done with the plugin (the last communicator finalized) while send comms may
/// still be open: removes every stats file and textfile this process wrote; the comms still
/// open write no file again (a comm made later does). Returns how many paths were tried.
pub(crate) fn remove_files() -> usize {
    let mut guard = lock(&PATHS);
    FINALIZED.store(true, Ordering::Release);
    let paths = std::mem::take(&mut *guard);
    drop(guard);
    for p in &paths {
        remove(p);
    }
    paths.len()
}

/// Every live send comm's latest published counters.
pub fn snapshot() -> StatsFile {
    let mut comms = Vec::new();
    let mut reg = lock(&REGISTRY);
    reg.retain(|w| match w.upgrade() {
        Some(s) => {
            comms.push(lock(&s).clone());
            true
        }
        None => false,
    });
    drop(reg);
    comms.sort_by_key(|c| c.id);
    StatsFile {
        pid: std::process::id(),
        host: host_name(),
        written_unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        comms,
    }
}

/// This process's file in a textfile-collector directory (the collector reads `*.prom` only).
fn textfile_path(dir: &Path) -> PathBuf {
    dir.join(format!("dqplb_{}.prom", std::process::id()))
}

/// Writes `snapshot()` to `path` atomically (temporary file in the same directory, then rename).
pub(crate) fn write_file(path: &Path) -> Result<(), String> {
    let text = toml::to_string(&snapshot()).map_err(|e| format!("cannot encode: {e}"))?;
    write_atomically(path, &text)
}

/// Writes `text` to a temporary file beside `path`, then renames it over `path`.
fn write_atomically(path: &Path, text: &str) -> Result<(), String> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot rename {} to it: {e}", tmp.display())
    })
}

/// Reads a stats file `dqplb stats` was pointed at.
pub fn read_file(path: &Path) -> Result<StatsFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: not a dqplb stats file: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(file: &str, log_ms: u64) -> StatsSection {
        StatsSection {
            file: file.to_string(),
            log_interval_ms: log_ms,
            ..StatsSection::default()
        }
    }

    #[test]
    fn nothing_configured_is_none() {
        assert!(CommTelemetry::new(&cfg("", 0), 0, "tcp", "p".into(), "same-rail", 2).is_none());
    }

    #[test]
    fn publishes_at_most_once_per_interval_and_the_file_round_trips() {
        let dir = std::env::temp_dir().join(format!("dqplb-tele-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stats.%p.toml");
        let mut t = CommTelemetry::new(
            &cfg(path.to_str().unwrap(), 0),
            3,
            "tcp",
            "10.0.0.2:5000".into(),
            "cross-rail",
            2,
        )
        .unwrap();
        let id = t.id();
        let mut stats = vec![QpStats::default(); 2];
        stats[1].segments = 7;
        stats[1].latency_log2[3] = 5;
        let base = NEXT_WRITE.load(Ordering::Relaxed).max(1);
        t.tick_at(base, &stats);
        let read = |t: &CommTelemetry| -> CommEntry {
            let f = read_file(&expand_path(path.to_str().unwrap())).unwrap();
            assert_eq!(f.pid, std::process::id());
            f.comms.into_iter().find(|c| c.id == t.id()).unwrap()
        };
        let c = read(&t);
        assert_eq!(
            (c.id, c.dev, c.class.as_str(), c.qps.len()),
            (id, 3, "cross-rail", 2)
        );
        assert_eq!(c.qps[1].segments, 7);
        assert_eq!(c.qps[1].latency_log2_ns[3], 5);
        // Within the interval nothing is published, a second later it is.
        stats[1].segments = 9;
        t.tick_at(base + 999_000_000, &stats);
        assert_eq!(read(&t).qps[1].segments, 7);
        t.tick_at(base + 1_000_000_000, &stats);
        assert_eq!(read(&t).qps[1].segments, 9);
        drop(t);
        assert!(
            snapshot().comms.iter().all(|c| c.id != id),
            "a closed comm stays listed"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
