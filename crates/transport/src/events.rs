//! Per-segment network events for NCCL's profiler (net ABI v10+): what a transport reports when a
//! segment goes on a QP or stream and when it completes; the ffi layer forwards them to NCCL.

use std::sync::{Arc, RwLock};

/// What one event describes, as NCCL's net_ib (ncclProfilerNetIbDescr_v1_t, QP) and net_socket
/// (ncclProfilerNetSockDescr_v1_t) describe theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventDescr {
    /// A work request on an RDMA QP.
    Qp {
        device: i32,
        wr_id: u64,
        opcode: i32,
        qp_num: u32,
        length: usize,
    },
    /// A segment written to (op 0, NCCL_SOCKET_SEND) or read from (op 1) a TCP stream.
    Socket { fd: i32, op: i32, length: usize },
}

/// A sink for events. `parent` is NCCL's per-request profiler handle (isend/irecv `phandle`,
/// never 0 when passed here); `start` returns the event's handle for `stop` (0: not recorded).
pub trait NetEvents: Send + Sync {
    fn start(&self, parent: usize, descr: &EventDescr) -> usize;
    fn stop(&self, event: usize);
}

static SINK: RwLock<Option<Arc<dyn NetEvents>>> = RwLock::new(None);

/// Installs (or, with None, removes) the process's event sink; comms created afterwards use it.
pub fn set_sink(sink: Option<Arc<dyn NetEvents>>) {
    match SINK.write() {
        Ok(mut g) => *g = sink,
        Err(p) => *p.into_inner() = sink,
    }
}

/// The sink a new comm reports to (None: no profiler, and no cost on the data path).
pub fn sink() -> Option<Arc<dyn NetEvents>> {
    match SINK.read() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    }
}

/// One comm's view: the sink, if any, and the parent handle of the request being posted.
#[derive(Clone, Default)]
pub(crate) struct CommEvents {
    sink: Option<Arc<dyn NetEvents>>,
    /// NCCL's profiler handle of the next isend (set by the plugin before it calls isend).
    pub next_parent: usize,
}

impl std::fmt::Debug for CommEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommEvents")
            .field("enabled", &self.sink.is_some())
            .field("next_parent", &self.next_parent)
            .finish()
    }
}

impl CommEvents {
    /// The process sink as it is now.
    pub(crate) fn current() -> CommEvents {
        CommEvents {
            sink: sink(),
            next_parent: 0,
        }
    }

    /// Whether events are reported at all (one branch on the data path when not).
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.sink.is_some()
    }

    /// Starts an event under `parent` (0: NCCL gave no handle, nothing recorded).
    #[inline]
    pub(crate) fn start(&self, parent: usize, descr: EventDescr) -> usize {
        match &self.sink {
            Some(s) if parent != 0 => s.start(parent, &descr),
            _ => 0,
        }
    }

    /// Stops an event `start` returned (0 is ignored).
    #[inline]
    pub(crate) fn stop(&self, event: usize) {
        if event != 0 {
            if let Some(s) = &self.sink {
                s.stop(event);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Rec(Mutex<Vec<String>>);
    impl NetEvents for Rec {
        fn start(&self, parent: usize, d: &EventDescr) -> usize {
            let mut g = self.0.lock().unwrap();
            g.push(format!("start {parent:#x} {d:?}"));
            g.len()
        }
        fn stop(&self, event: usize) {
            self.0.lock().unwrap().push(format!("stop {event}"));
        }
    }

    #[test]
    fn parentless_and_zero_events_are_not_reported() {
        let rec = Arc::new(Rec::default());
        let ev = CommEvents {
            sink: Some(rec.clone()),
            next_parent: 0,
        };
        let d = EventDescr::Socket {
            fd: 7,
            op: 0,
            length: 100,
        };
        assert_eq!(ev.start(0, d), 0);
        ev.stop(0);
        let h = ev.start(0x40, d);
        assert_eq!(h, 1);
        ev.stop(h);
        assert_eq!(
            *rec.0.lock().unwrap(),
            vec![
                "start 0x40 Socket { fd: 7, op: 0, length: 100 }".to_string(),
                "stop 1".to_string()
            ]
        );
        let off = CommEvents::default();
        assert!(!off.enabled());
        assert_eq!(off.start(0x40, d), 0);
    }
}
