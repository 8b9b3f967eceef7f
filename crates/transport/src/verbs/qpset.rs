//! A connection's queue pairs: one control QP plus N data QPs sharing one send CQ, one receive CQ
//! and optionally one shared receive queue, connected as a unit, polled without blocking.

use super::completion::WorkCompletion;
use super::device::PortInfo;
use super::error::{Result, VerbsError};
use super::qp::{QpCaps, QpEndpoint, RcQp};
use super::resources::{CompletionQueue, ProtectionDomain};
use super::srq::SharedReceiveQueue;
use super::tuning::QpTuning;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Most data QPs one set may hold (NCCLX caps its QP count at 128 as well).
pub const MAX_DATA_QPS: usize = 128;

/// Sizes of a QP set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpSetConfig {
    /// Number of data QPs (1..=MAX_DATA_QPS).
    pub n_data: usize,
    /// Send work requests per QP (the most writes one QP may have in flight).
    pub send_depth: u32,
    /// Receive work requests per QP (zero-length receives kept posted).
    pub recv_depth: u32,
    /// Non-zero: the data QPs draw their receives from one shared receive queue of this depth
    /// (clamped to the device's max_srq_wr) instead of `recv_depth` each.
    pub srq_depth: u32,
}

impl Default for QpSetConfig {
    fn default() -> Self {
        QpSetConfig {
            n_data: 4,
            send_depth: 128,
            recv_depth: 128,
            srq_depth: 0,
        }
    }
}

/// The endpoints of every QP of one side, exchanged during connection setup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    pub control: QpEndpoint,
    pub data: Vec<QpEndpoint>,
}

impl ConnInfo {
    /// Wire form: u16 LE data-QP count, then the control endpoint, then each data endpoint.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(2 + QpEndpoint::WIRE_LEN * (1 + self.data.len()));
        out.extend_from_slice(&(self.data.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.control.encode());
        for ep in &self.data {
            out.extend_from_slice(&ep.encode());
        }
        out
    }

    /// Parses `encode`'s output, rejecting truncated or oversized records.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        if bytes.len() < 2 {
            return Err(VerbsError::invalid(
                "connection info shorter than its header",
            ));
        }
        let n = usize::from(u16::from_le_bytes([bytes[0], bytes[1]]));
        if n == 0 || n > MAX_DATA_QPS {
            return Err(VerbsError::invalid(format!(
                "connection info announces {n} data QPs (1..={MAX_DATA_QPS})"
            )));
        }
        let want = 2 + QpEndpoint::WIRE_LEN * (n + 1);
        if bytes.len() != want {
            return Err(VerbsError::invalid(format!(
                "connection info has {} bytes, expected {want} for {n} data QPs",
                bytes.len()
            )));
        }
        let mut records = bytes[2..].chunks_exact(QpEndpoint::WIRE_LEN);
        let control = QpEndpoint::decode(records.next().unwrap_or_default())?;
        let data = records
            .map(QpEndpoint::decode)
            .collect::<Result<Vec<_>>>()?;
        Ok(ConnInfo { control, data })
    }

    /// Encoded length for `n_data` data QPs.
    pub(crate) fn wire_len(n_data: usize) -> usize {
        2 + QpEndpoint::WIRE_LEN * (n_data + 1)
    }
}

/// Chooses the UDP source ports of a connection's data QPs (path pinning), on the sending side.
pub trait PortPinner: Send + Sync {
    /// One port per data QP of `local` (0xC000..=0xFFFF), once the peer's endpoints are known.
    fn ports(&self, local: &ConnInfo, remote: &ConnInfo) -> std::result::Result<Vec<u16>, String>;
    /// A port on another path for data QP `qp`, now on `port` between `local_qpn` and
    /// `remote_qpn` (a straggler's re-pin or a failed path's replacement); None: keep hashing.
    fn repin(&self, qp: usize, port: u16, local_qpn: u32, remote_qpn: u32) -> Option<u16>;
}

/// Where the engine's re-pin rule sends drained data QPs (`Sender::repin_path`): the source
/// port each takes when it is re-pinned next, and the port each had before its last move.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RepinAims {
    next: Vec<Option<u16>>,
    before: Vec<Option<u16>>,
}

impl RepinAims {
    pub(crate) fn new(n_data: usize) -> RepinAims {
        RepinAims {
            next: vec![None; n_data],
            before: vec![None; n_data],
        }
    }

    /// Data QP `i`, pinned to `ports[i]`, is drained for `path`: onto another QP's port (the
    /// port it leaves is kept for a move back), back onto the port it had, or (None) wherever the
    /// pinner's re-pin sends it. Returns the port it will take, if the rule chose one.
    pub(crate) fn aim(
        &mut self,
        i: usize,
        path: Option<dqplb_engine::RepinPath>,
        ports: &[Option<u16>],
    ) -> Option<u16> {
        use dqplb_engine::RepinPath;
        let port = match path? {
            RepinPath::Onto { qp } => {
                let to = ports.get(qp).copied().flatten()?;
                *self.before.get_mut(i)? = ports.get(i).copied().flatten();
                to
            }
            RepinPath::Back => self.before.get(i).copied().flatten()?,
        };
        *self.next.get_mut(i)? = Some(port);
        Some(port)
    }

    /// The port data QP `i` takes now, if the rule chose one (once).
    pub(crate) fn take(&mut self, i: usize) -> Option<u16> {
        self.next.get_mut(i)?.take()
    }
}

/// Which QP of a set a completion belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpRole {
    Control,
    Data(usize),
    /// A data QP of that index that failed and was replaced (its late completions are dropped).
    Retired(usize),
}

/// One control QP and N data QPs of a connection, with their CQs.
pub struct QpSet {
    pd: Arc<ProtectionDomain>,
    send_cq: Arc<CompletionQueue>,
    recv_cq: Arc<CompletionQueue>,
    srq: Option<Arc<SharedReceiveQueue>>,
    control: RcQp,
    data: Vec<RcQp>,
    local: ConnInfo,
    sgid_index: u32,
    tuning: QpTuning,
    port: u8,
    caps: QpCaps,
    /// (qpn, role) sorted by qpn, for completion routing without allocation
    by_qpn: Vec<(u32, QpRole)>,
    /// Path pinning: the chooser and each data QP's pinned port (None: the NIC's own).
    pinner: Option<Arc<dyn PortPinner>>,
    ports: Vec<Option<u16>>,
    /// The re-pin rule's ports for drained data QPs.
    aims: RepinAims,
    /// The peer's QPN of each data QP (known once connected), for re-pinning.
    remote_qpns: Vec<u32>,
}

fn initial_psn(salt: u32) -> u32 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (nanos ^ salt.wrapping_mul(0x9e37_79b9)) & 0xff_ffff
}

impl QpSet {
    /// Creates the CQs and QPs of a set on `port` (RESET state until `connect`).
    pub fn new(
        pd: &Arc<ProtectionDomain>,
        port: &PortInfo,
        tuning: QpTuning,
        cfg: QpSetConfig,
    ) -> Result<Self> {
        let dev = pd.context().name().to_string();
        if cfg.n_data == 0 || cfg.n_data > MAX_DATA_QPS {
            return Err(VerbsError::invalid(format!(
                "{dev}: {} data QPs requested (1..={MAX_DATA_QPS})",
                cfg.n_data
            )));
        }
        if cfg.send_depth == 0 || cfg.recv_depth == 0 {
            return Err(VerbsError::invalid(format!(
                "{dev}: QP depths must be non-zero"
            )));
        }
        let (sgid_index, gid) = match (port.gid, port.lid) {
            (Some(g), _) => (g.index, g.gid),
            (None, lid) if lid != 0 => (0, [0u8; 16]),
            (None, _) => {
                return Err(VerbsError::invalid(format!(
                    "{dev} port {}: no usable GID and no LID",
                    port.port
                )))
            }
        };
        let n_qps = cfg.n_data as u32 + 1;
        let send_cq = CompletionQueue::new(pd.context(), cfg.send_depth.saturating_mul(n_qps))?;
        let srq = match cfg.srq_depth {
            0 => None,
            d => Some(SharedReceiveQueue::new(pd, d)?),
        };
        let recv_entries = match &srq {
            Some(q) => q.depth().saturating_add(cfg.recv_depth),
            None => cfg.recv_depth.saturating_mul(n_qps),
        };
        let recv_cq = CompletionQueue::new(pd.context(), recv_entries)?;
        let caps = QpCaps {
            max_send_wr: cfg.send_depth,
            max_recv_wr: cfg.recv_depth,
        };
        let control = RcQp::new(pd, &send_cq, &recv_cq, None, port.port, caps)?;
        let data = (0..cfg.n_data)
            .map(|_| RcQp::new(pd, &send_cq, &recv_cq, srq.as_ref(), port.port, caps))
            .collect::<Result<Vec<_>>>()?;
        let endpoint = |qp: &RcQp| QpEndpoint {
            qpn: qp.qpn(),
            psn: initial_psn(qp.qpn()),
            gid,
            lid: port.lid,
            mtu: port.active_mtu,
        };
        let local = ConnInfo {
            control: endpoint(&control),
            data: data.iter().map(endpoint).collect(),
        };
        let mut by_qpn: Vec<(u32, QpRole)> = std::iter::once((control.qpn(), QpRole::Control))
            .chain(
                data.iter()
                    .enumerate()
                    .map(|(i, q)| (q.qpn(), QpRole::Data(i))),
            )
            .collect();
        by_qpn.sort_by_key(|e| e.0);
        Ok(QpSet {
            pd: Arc::clone(pd),
            send_cq,
            recv_cq,
            srq,
            control,
            data,
            local,
            sgid_index,
            tuning,
            port: port.port,
            caps,
            by_qpn,
            pinner: None,
            ports: vec![None; cfg.n_data],
            aims: RepinAims::new(cfg.n_data),
            remote_qpns: vec![0; cfg.n_data],
        })
    }

    /// Pins the data QPs' source ports with `pinner` at `connect` (sending side).
    pub fn set_port_pinner(&mut self, pinner: Arc<dyn PortPinner>) {
        self.pinner = Some(pinner);
    }

    /// The source port data QP `i` was pinned to (None: not pinned, the NIC's own port).
    pub fn pinned_port(&self, i: usize) -> Option<u16> {
        self.ports.get(i).copied().flatten()
    }

    /// Drained data QP `i` goes where the engine's re-pin rule says (`path`, see
    /// [`RepinAims::aim`]) at its next re-pin, in place or as a new QP pair; the port, if any.
    pub(crate) fn aim_repin(
        &mut self,
        i: usize,
        path: Option<dqplb_engine::RepinPath>,
    ) -> Option<u16> {
        self.pinner.as_ref()?;
        self.aims.aim(i, path, &self.ports)
    }

    /// Re-pins drained data QP `i` in place with `mlx5dv_modify_qp_udp_sport`: Ok(Some(port))
    /// done, Ok(None) when the QP is not pinned, the pinner has no other port, or the device
    /// cannot (then the caller replaces the QP pair, as for an unpinned straggler). The port is
    /// the re-pin rule's when it chose one (`aim_repin`), else the pinner's.
    pub fn repin_live(&mut self, i: usize) -> Result<Option<u16>> {
        let (Some(pinner), Some(old)) = (self.pinner.clone(), self.pinned_port(i)) else {
            return Ok(None);
        };
        let qp = self.data(i)?;
        let aimed = self.aims.next.get(i).copied().flatten();
        let Some(port) = aimed.or_else(|| pinner.repin(i, old, qp.qpn(), self.remote_qpns[i]))
        else {
            return Ok(None);
        };
        if !qp.set_udp_sport(port)? {
            return Ok(None);
        }
        self.aims.take(i);
        self.ports[i] = Some(port);
        Ok(Some(port))
    }

    /// A new data QP for this set (same CQs, SRQ, port and depths), in RESET, with its endpoint
    /// (a fresh PSN): the replacement of a failed one, connected by `connect_spare`.
    pub(crate) fn create_spare(&self) -> Result<(RcQp, QpEndpoint)> {
        let qp = RcQp::new(
            &self.pd,
            &self.send_cq,
            &self.recv_cq,
            self.srq.as_ref(),
            self.port,
            self.caps,
        )?;
        let ep = QpEndpoint {
            qpn: qp.qpn(),
            psn: initial_psn(qp.qpn()),
            ..self.local.control
        };
        Ok((qp, ep))
    }

    /// Connects a spare data QP (`local` its endpoint) to the peer's `remote` (RESET -> RTS).
    pub(crate) fn connect_spare(
        &self,
        qp: &RcQp,
        local: &QpEndpoint,
        remote: &QpEndpoint,
    ) -> Result<()> {
        qp.connect(local, self.sgid_index, remote, &self.tuning)
    }

    /// As `connect_spare` for the replacement of data QP `i`: a pinned QP's replacement gets a
    /// port on another path (the pinner's re-pin), recorded for `i`; unpinned ones as before.
    pub(crate) fn connect_spare_for(
        &mut self,
        i: usize,
        qp: &RcQp,
        local: &QpEndpoint,
        remote: &QpEndpoint,
    ) -> Result<()> {
        let aimed = self.aims.take(i);
        let port = match (&self.pinner, self.pinned_port(i)) {
            (Some(p), Some(old)) => aimed
                .or_else(|| p.repin(i, old, local.qpn, remote.qpn))
                .or(Some(old)),
            _ => None,
        };
        let label = port.map(flow_label_of).transpose()?.unwrap_or(0);
        qp.connect_with_flow_label(local, self.sgid_index, remote, &self.tuning, label)?;
        if let Some(slot) = self.ports.get_mut(i) {
            *slot = port;
        }
        if let Some(r) = self.remote_qpns.get_mut(i) {
            *r = remote.qpn;
        }
        Ok(())
    }

    /// Puts connected spare `qp` (endpoint `ep`) in place of data QP `i` and returns the old one.
    /// Completions of the old QP's number route to `QpRole::Retired(i)` from now on.
    pub(crate) fn swap_data(&mut self, i: usize, qp: RcQp, ep: QpEndpoint) -> Result<RcQp> {
        if i >= self.data.len() {
            return Err(VerbsError::invalid(format!(
                "{}: data QP {i} of {} does not exist",
                self.device(),
                self.data.len()
            )));
        }
        let new_qpn = qp.qpn();
        let old = std::mem::replace(&mut self.data[i], qp);
        self.local.data[i] = ep;
        for e in self.by_qpn.iter_mut() {
            if e.0 == old.qpn() {
                e.1 = QpRole::Retired(i);
            }
        }
        self.by_qpn.push((new_qpn, QpRole::Data(i)));
        self.by_qpn.sort_by_key(|e| e.0);
        Ok(old)
    }

    /// Forgets the number of a retired QP that will complete nothing more (it was destroyed).
    pub(crate) fn forget(&mut self, qpn: u32) {
        self.by_qpn
            .retain(|e| !(e.0 == qpn && matches!(e.1, QpRole::Retired(_))));
    }

    /// This side's endpoints, to send to the peer.
    pub fn local_info(&self) -> &ConnInfo {
        &self.local
    }

    /// Connects every QP to its counterpart in `remote` (same data-QP count required); with a
    /// port pinner, each data QP's flow label selects its pinned source port.
    pub fn connect(&mut self, remote: &ConnInfo) -> Result<()> {
        if remote.data.len() != self.data.len() {
            return Err(VerbsError::invalid(format!(
                "{}: peer has {} data QPs, this side {}",
                self.device(),
                remote.data.len(),
                self.data.len()
            )));
        }
        // the control QP carries the FIFO announcements: NCCL_IB_FIFO_TC, as NCCL's FIFO QP
        let control_tuning = QpTuning {
            traffic_class: self.tuning.fifo_traffic_class,
            ..self.tuning
        };
        self.control.connect(
            &self.local.control,
            self.sgid_index,
            &remote.control,
            &control_tuning,
        )?;
        if let Some(pinner) = &self.pinner {
            let ports = pinner.ports(&self.local, remote).map_err(|e| {
                VerbsError::invalid(format!("{}: path pinning: {e}", self.device()))
            })?;
            if ports.len() != self.data.len() {
                return Err(VerbsError::invalid(format!(
                    "{}: path pinning chose {} ports for {} data QPs",
                    self.device(),
                    ports.len(),
                    self.data.len()
                )));
            }
            self.ports = ports.into_iter().map(Some).collect();
        }
        for (i, ((qp, local), peer)) in self
            .data
            .iter()
            .zip(&self.local.data)
            .zip(&remote.data)
            .enumerate()
        {
            let label = self.ports[i].map(flow_label_of).transpose()?.unwrap_or(0);
            qp.connect_with_flow_label(local, self.sgid_index, peer, &self.tuning, label)?;
            self.remote_qpns[i] = peer.qpn;
        }
        for (i, qp) in self.data.iter().enumerate() {
            if let Some(port) = self.ports[i] {
                match qp.flow_label() {
                    Ok(fl) => {
                        tracing::info!(target: "dqplb::net", "{}: data QP {i} (QPN {}): pinned to UDP source port {port}, flow label {fl:#x} (ibv_query_qp; mlx5 sends from that port, rxe ignores the label)", self.device(), qp.qpn())
                    }
                    Err(e) => {
                        tracing::info!(target: "dqplb::net", "{}: data QP {i}: pinned to port {port}, flow label not readable: {e}", self.device())
                    }
                }
            }
        }
        // What the QPs really carry (NCCL v10+ trafficClass / NCCL_IB_TC), one INFO line each.
        for (i, qp) in self.data.iter().enumerate() {
            match qp.traffic_class() {
                Ok(tc) => {
                    tracing::info!(target: "dqplb::net", "{}: data QP {i} (QPN {}): GRH traffic class {tc} (ibv_query_qp)", self.device(), qp.qpn())
                }
                Err(e) => {
                    tracing::info!(target: "dqplb::net", "{}: data QP {i}: traffic class not readable: {e}", self.device())
                }
            }
        }
        Ok(())
    }

    pub fn device(&self) -> &str {
        self.pd.context().name()
    }

    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    pub fn control(&self) -> &RcQp {
        &self.control
    }

    /// The data QPs' shared receive queue (None when each has its own receive queue).
    pub fn srq(&self) -> Option<&Arc<SharedReceiveQueue>> {
        self.srq.as_ref()
    }

    pub fn n_data(&self) -> usize {
        self.data.len()
    }

    /// Data QP `i` (0-based).
    pub fn data(&self, i: usize) -> Result<&RcQp> {
        self.data.get(i).ok_or_else(|| {
            VerbsError::invalid(format!(
                "{}: data QP {i} of {} does not exist",
                self.device(),
                self.data.len()
            ))
        })
    }

    /// The role of the QP numbered `qpn` in this set (None if it is not ours).
    pub fn role_of(&self, qpn: u32) -> Option<QpRole> {
        self.by_qpn
            .binary_search_by_key(&qpn, |e| e.0)
            .ok()
            .map(|i| self.by_qpn[i].1)
    }

    /// Polls send completions into `out`; returns how many. Never blocks or allocates.
    pub fn poll_send(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        self.send_cq.poll(out)
    }

    /// Polls receive completions into `out`; returns how many. Never blocks or allocates.
    pub fn poll_recv(&self, out: &mut [WorkCompletion]) -> Result<usize> {
        self.recv_cq.poll(out)
    }

    /// Ok for a successful completion; else an error naming device, QP and status.
    pub fn check(&self, wc: &WorkCompletion) -> Result<()> {
        wc.result(self.device())
    }
}

/// The flow label that makes mlx5 send from `port` (engine::pinning, checked there for every port).
fn flow_label_of(port: u16) -> Result<u32> {
    dqplb_engine::pinning::flow_label_for_port(port).map_err(|e| VerbsError::invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(qpn: u32) -> QpEndpoint {
        QpEndpoint {
            qpn,
            psn: qpn + 100,
            gid: [7; 16],
            lid: 0,
            mtu: 4096,
        }
    }

    #[test]
    fn repin_aims_move_onto_another_port_and_back() {
        use dqplb_engine::RepinPath;
        let ports = [Some(0xC001), Some(0xC002), Some(0xC003), None];
        let mut a = RepinAims::new(4);
        // Not the rule's drain: the pinner chooses.
        assert_eq!(a.aim(2, None, &ports), None);
        assert_eq!(a.take(2), None);
        // Onto QP 0's port; QP 2's own port is kept for the move back.
        assert_eq!(
            a.aim(2, Some(RepinPath::Onto { qp: 0 }), &ports),
            Some(0xC001)
        );
        assert_eq!(a.take(2), Some(0xC001));
        assert_eq!(a.take(2), None, "taken once");
        let moved = [Some(0xC001), Some(0xC002), Some(0xC001), None];
        assert_eq!(a.aim(2, Some(RepinPath::Back), &moved), Some(0xC003));
        assert_eq!(a.take(2), Some(0xC003));
        // Nothing to go back to, an unpinned target or a QP out of range: the pinner chooses.
        assert_eq!(a.aim(1, Some(RepinPath::Back), &ports), None);
        assert_eq!(a.aim(1, Some(RepinPath::Onto { qp: 3 }), &ports), None);
        assert_eq!(a.aim(1, Some(RepinPath::Onto { qp: 9 }), &ports), None);
        assert_eq!(a.aim(7, Some(RepinPath::Onto { qp: 0 }), &ports), None);
        assert_eq!(a.take(1), None);
    }

    #[test]
    fn conn_info_round_trips() {
        let info = ConnInfo {
            control: ep(1),
            data: vec![ep(2), ep(3), ep(4)],
        };
        let bytes = info.encode();
        assert_eq!(bytes.len(), ConnInfo::wire_len(3));
        assert_eq!(ConnInfo::decode(&bytes), Ok(info));
    }

    #[test]
    fn conn_info_rejects_bad_records() {
        let info = ConnInfo {
            control: ep(1),
            data: vec![ep(2)],
        };
        let bytes = info.encode();
        assert!(ConnInfo::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(ConnInfo::decode(&[]).is_err());
        let mut zero = bytes.clone();
        zero[0] = 0;
        assert!(ConnInfo::decode(&zero).is_err());
        let mut many = bytes;
        many[0] = 200;
        assert!(ConnInfo::decode(&many).is_err());
    }

    #[test]
    fn psn_fits_24_bits() {
        for salt in [0, 1, 0xffff_ffff, 12345] {
            assert!(initial_psn(salt) <= 0xff_ffff);
        }
    }
}
