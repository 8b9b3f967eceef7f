//! The bootstrap exchange of connect info (ncclNetHandle_t) between the emulated ranks: files in a
//! per-test directory, written atomically (temp + rename) and polled with a deadline.

use dqplb_test_support::nccl::HANDLE_BYTES;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub(crate) struct Rendezvous {
    dir: PathBuf,
}

impl Rendezvous {
    pub(crate) fn new(dir: PathBuf) -> Result<Rendezvous, String> {
        std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        Ok(Rendezvous { dir })
    }

    pub(crate) fn publish(&self, name: &str, bytes: &[u8]) -> Result<(), String> {
        let tmp = self.dir.join(format!(".{name}.{}", std::process::id()));
        std::fs::write(&tmp, bytes).map_err(|e| format!("write {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, self.dir.join(name)).map_err(|e| format!("rename {name}: {e}"))
    }

    pub(crate) fn wait(&self, name: &str, limit: Duration) -> Result<[u8; HANDLE_BYTES], String> {
        let b = self.wait_bytes(name, limit)?;
        b.try_into()
            .map_err(|b: Vec<u8>| format!("{name}: {} bytes, expected {HANDLE_BYTES}", b.len()))
    }

    pub(crate) fn wait_bytes(&self, name: &str, limit: Duration) -> Result<Vec<u8>, String> {
        let path = self.dir.join(name);
        let start = Instant::now();
        loop {
            if let Ok(b) = std::fs::read(&path) {
                return Ok(b);
            }
            if start.elapsed() > limit {
                return Err(format!(
                    "rendezvous: {} did not appear within {limit:?}",
                    path.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// bootstrapBarrier stand-in: every rank writes its mark, then waits for all the others.
    pub(crate) fn barrier(
        &self,
        what: &str,
        rank: usize,
        nranks: usize,
        limit: Duration,
    ) -> Result<(), String> {
        self.publish(&format!("b_{what}_{rank}"), b"1")?;
        for r in 0..nranks {
            self.wait_bytes(&format!("b_{what}_{r}"), limit)?;
        }
        Ok(())
    }
}
