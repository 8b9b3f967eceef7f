//! Fake sysfs/debugfs trees for tests (ours and the plugin's): builds, under a fresh temporary
//! directory, the files and links the reader looks at, mirroring the real paths below the roots.

use super::names::{CC_PARAM_NAMES, COUNTER_NAMES};
use super::reader::Roots;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A temporary tree with `sys/` (sysfs root) and `debug/` (debugfs root); removed on drop.
#[derive(Debug)]
pub struct FakeTree {
    root: PathBuf,
}

impl FakeTree {
    /// Creates an empty tree under the system temp directory.
    pub fn new(tag: &str) -> io::Result<Self> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("dqplb-{tag}-{}-{n}", std::process::id()));
        if root.exists() {
            fs::remove_dir_all(&root)?;
        }
        fs::create_dir_all(root.join("sys/class/infiniband"))?;
        fs::create_dir_all(root.join("debug"))?;
        Ok(FakeTree { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn roots(&self) -> Roots {
        Roots::new(self.root.join("sys"), self.root.join("debug"))
    }

    /// Writes `content` at `rel` (relative to the tree root), creating parents.
    pub fn write(&self, rel: &str, content: &str) -> io::Result<()> {
        let path = self.root.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        if path.is_dir() {
            fs::remove_dir_all(&path)?;
        }
        fs::write(path, content)
    }

    /// Removes a file or directory at `rel`.
    pub fn remove(&self, rel: &str) -> io::Result<()> {
        let path = self.root.join(rel);
        if path.is_dir() {
            fs::remove_dir_all(path)
        } else {
            fs::remove_file(path)
        }
    }

    /// Replaces the file at `rel` by a directory, which makes reading it fail (unreadable).
    pub fn make_unreadable(&self, rel: &str) -> io::Result<()> {
        let path = self.root.join(rel);
        if path.is_file() {
            fs::remove_file(&path)?;
        }
        fs::create_dir_all(path)
    }

    /// An RDMA device `dev` on PCI function `bdf` bound to `driver`, with one port (line rate
    /// `rate`, e.g. "100 Gb/sec (4X EDR)"), counters at 0 and, when given, netdev `netdev`.
    pub fn add_device(
        &self,
        dev: &str,
        bdf: &str,
        driver: &str,
        netdev: Option<&str>,
        rate: &str,
    ) -> io::Result<()> {
        let pci = self.root.join("sys/devices/pci0000:00").join(bdf);
        fs::create_dir_all(&pci)?;
        let drv = self.root.join("sys/bus/pci/drivers").join(driver);
        fs::create_dir_all(&drv)?;
        symlink(&drv, &pci.join("driver"))?;
        let ib = self.root.join("sys/class/infiniband").join(dev);
        fs::create_dir_all(&ib)?;
        symlink(&pci, &ib.join("device"))?;
        if let Some(nd) = netdev {
            fs::create_dir_all(pci.join("net").join(nd))?;
            fs::create_dir_all(self.root.join("sys/class/net").join(nd))?;
        }
        self.write(
            &format!("sys/class/infiniband/{dev}/ports/1/rate"),
            &format!("{rate}\n"),
        )?;
        for c in COUNTER_NAMES {
            self.set_counter(dev, 1, c, 0)?;
        }
        Ok(())
    }

    /// Writes every cc_params file of `bdf` from `values` (name, value); names not listed get
    /// the firmware default when `fill_defaults`, else are left absent.
    pub fn set_cc_params(
        &self,
        bdf: &str,
        values: &[(&str, u64)],
        fill_defaults: bool,
    ) -> io::Result<()> {
        for name in CC_PARAM_NAMES {
            let v = values.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
            let v = match v {
                Some(v) => Some(v),
                None if fill_defaults => Some(firmware_default(name)),
                None => None,
            };
            if let Some(v) = v {
                self.write(&cc_rel(bdf, name), &format!("{v}\n"))?;
            }
        }
        Ok(())
    }

    /// Writes raw text into one cc_params file.
    pub fn set_cc_raw(&self, bdf: &str, name: &str, text: &str) -> io::Result<()> {
        self.write(&cc_rel(bdf, name), text)
    }

    /// Writes all 8 ECN enables of both sides; priorities in `enabled` get "1", others "0".
    pub fn set_ecn(&self, netdev: &str, enabled_rp: &[u8], enabled_np: &[u8]) -> io::Result<()> {
        for (side, on) in [("roce_rp", enabled_rp), ("roce_np", enabled_np)] {
            for p in 0..8u8 {
                let v = if on.contains(&p) { "1\n" } else { "0\n" };
                self.write(&format!("sys/class/net/{netdev}/ecn/{side}/enable/{p}"), v)?;
            }
        }
        Ok(())
    }

    pub fn set_counter(&self, dev: &str, port: u32, name: &str, value: u64) -> io::Result<()> {
        self.write(
            &format!("sys/class/infiniband/{dev}/ports/{port}/hw_counters/{name}"),
            &format!("{value}\n"),
        )
    }
}

impl Drop for FakeTree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// Relative path of a cc_params file in a fake tree.
pub fn cc_rel(bdf: &str, name: &str) -> String {
    format!("debug/mlx5/{bdf}/cc_params/{name}")
}

/// The firmware default of a cc_params name as the fake tree writes it (0 where none is known).
pub(crate) fn firmware_default(name: &str) -> u64 {
    match name {
        "rp_clamp_tgt_rate" => 0,
        "rp_clamp_tgt_rate_ati" => 1,
        "rp_time_reset" => 300,
        "rp_byte_reset" => 32767,
        "rp_threshold" => 1,
        "rp_ai_rate" => 5,
        "rp_max_rate" => 0,
        "rp_hai_rate" => 50,
        "rp_min_dec_fac" => 50,
        "rp_min_rate" => 1,
        "rp_rate_to_set_on_first_cnp" => 0,
        "rp_dce_tcp_g" => 1019,
        "rp_dce_tcp_rtt" => 1,
        "rp_rate_reduce_monitor_period" => 4,
        "rp_initial_alpha_value" => 1023,
        "rp_gd" => 11,
        "np_min_time_between_cnps" => 4,
        "np_cnp_dscp" => 48,
        "np_cnp_prio_mode" => 1,
        "np_cnp_prio" => 6,
        _ => 0,
    }
}

fn symlink(target: &Path, link: &Path) -> io::Result<()> {
    if link.exists() || link.symlink_metadata().is_ok() {
        fs::remove_file(link)?;
    }
    std::os::unix::fs::symlink(target, link)
}
