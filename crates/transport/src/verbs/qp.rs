//! Reliable-connected queue pairs: creation, the INIT -> RTR -> RTS walk given the peer's
//! endpoint, forced error state, and non-blocking posting of RDMA writes and zero-length receives.

use super::device::mtu_code;
use super::error::{Result, VerbsError};
use super::resources::{CompletionQueue, LocalSlice, ProtectionDomain, RemoteSlice};
use super::srq::SharedReceiveQueue;
use super::sys as ib;
use super::tuning::QpTuning;
use std::ptr::NonNull;
use std::sync::Arc;

/// What the peer needs to connect one of its QPs to one of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpEndpoint {
    pub qpn: u32,
    /// First packet sequence number this side sends with (24 bits).
    pub psn: u32,
    pub gid: [u8; 16],
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Active path MTU of this side in bytes.
    pub mtu: u32,
}

impl QpEndpoint {
    /// Size of the wire encoding.
    pub(crate) const WIRE_LEN: usize = 32;

    /// Fixed little-endian encoding: qpn u32, psn u32, gid [16], lid u16, mtu u16, 4 zero bytes.
    pub fn encode(&self) -> [u8; Self::WIRE_LEN] {
        let mut b = [0u8; Self::WIRE_LEN];
        b[0..4].copy_from_slice(&self.qpn.to_le_bytes());
        b[4..8].copy_from_slice(&self.psn.to_le_bytes());
        b[8..24].copy_from_slice(&self.gid);
        b[24..26].copy_from_slice(&self.lid.to_le_bytes());
        b[26..28].copy_from_slice(&(self.mtu.min(u16::MAX as u32) as u16).to_le_bytes());
        b
    }

    /// Decodes and validates `encode`'s output (QPN and PSN fit 24 bits, MTU is a verbs MTU).
    pub fn decode(b: &[u8]) -> Result<Self> {
        if b.len() != Self::WIRE_LEN {
            return Err(VerbsError::invalid(format!(
                "QP endpoint record has {} bytes, expected {}",
                b.len(),
                Self::WIRE_LEN
            )));
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[8..24]);
        let ep = QpEndpoint {
            qpn: u32_at(0),
            psn: u32_at(4),
            gid,
            lid: u16::from_le_bytes([b[24], b[25]]),
            mtu: u32::from(u16::from_le_bytes([b[26], b[27]])),
        };
        if ep.qpn > 0xff_ffff || ep.psn > 0xff_ffff {
            return Err(VerbsError::invalid(format!(
                "peer QP endpoint has qpn {:#x} / psn {:#x} beyond 24 bits",
                ep.qpn, ep.psn
            )));
        }
        if mtu_code(ep.mtu).is_none() {
            return Err(VerbsError::invalid(format!(
                "peer QP endpoint has MTU {}",
                ep.mtu
            )));
        }
        Ok(ep)
    }
}

/// Inline bytes asked of every QP: a full FIFO entry (a grouped receive's announcement, 212
/// bytes) and small payloads. A provider that refuses gets a QP without inline data.
const REQUESTED_INLINE: u32 = 256;

/// Work-request capacities of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
}

/// QP states as verbs numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Sqd,
    Sqe,
    Error,
    Unknown,
}

/// A reliable-connected QP.
pub struct RcQp {
    raw: NonNull<ib::ibv_qp>,
    /// `context->ops.post_send` / `post_recv`, read once at creation: verbs.h's inline
    /// ibv_post_send / ibv_post_recv call exactly these.
    post_send_fn: ib::PostSendFn,
    post_recv_fn: ib::PostRecvFn,
    qpn: u32,
    port: u8,
    caps: QpCaps,
    /// Bytes a write may carry inline (IBV_SEND_INLINE), as the provider granted at creation.
    max_inline: u32,
    pd: Arc<ProtectionDomain>,
    // keep the CQs alive as long as the QP references them
    _send_cq: Arc<CompletionQueue>,
    _recv_cq: Arc<CompletionQueue>,
    /// The shared receive queue this QP's incoming writes consume, if any (kept alive too).
    srq: Option<Arc<SharedReceiveQueue>>,
}

// SAFETY: posting to a QP is thread-safe in libibverbs (providers lock the queues); the Rust side
// holds only immutable data.
unsafe impl Send for RcQp {}
// SAFETY: as above.
unsafe impl Sync for RcQp {}

impl std::fmt::Debug for RcQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RcQp({} qpn {:#x})", self.device(), self.qpn)
    }
}

impl RcQp {
    /// Creates an RC QP in RESET on `port`, completions to `send_cq` / `recv_cq`, one SGE per WR,
    /// unsignaled by default (each post chooses). With `srq` its receives come from that shared
    /// queue (`caps.max_recv_wr` is then unused and `post_recv` refused).
    pub fn new(
        pd: &Arc<ProtectionDomain>,
        send_cq: &Arc<CompletionQueue>,
        recv_cq: &Arc<CompletionQueue>,
        srq: Option<&Arc<SharedReceiveQueue>>,
        port: u8,
        caps: QpCaps,
    ) -> Result<Self> {
        // SAFETY: plain old data, zero is valid for every field.
        let mut init: ib::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = send_cq.as_ptr();
        init.recv_cq = recv_cq.as_ptr();
        init.qp_type = ib::IBV_QPT_RC;
        init.sq_sig_all = 0;
        init.cap.max_send_wr = caps.max_send_wr.max(1);
        match srq {
            Some(q) => init.srq = q.as_ptr(),
            None => {
                init.cap.max_recv_wr = caps.max_recv_wr.max(1);
                init.cap.max_recv_sge = 1;
            }
        }
        init.cap.max_send_sge = 1;
        init.cap.max_inline_data = REQUESTED_INLINE;
        let v = pd.context().verbs();
        // SAFETY: live PD and CQs of the same context; `init` is fully initialised.
        let mut raw = unsafe { (v.create_qp)(pd.as_ptr(), &mut init) };
        if raw.is_null() {
            // A provider that cannot inline that much: the same QP without inline data.
            init.cap.max_inline_data = 0;
            // SAFETY: as above.
            raw = unsafe { (v.create_qp)(pd.as_ptr(), &mut init) };
        }
        let raw = NonNull::new(raw)
            .ok_or_else(|| VerbsError::last_os("ibv_create_qp", pd.context().name()))?;
        // ibv_create_qp wrote the granted capacities back into `init.cap`.
        let max_inline = init.cap.max_inline_data;
        // SAFETY: a created QP is initialised; qp_num is immutable, and its context's ops table
        // was filled in by the provider when the device was opened.
        let (qpn, ops) = unsafe {
            let qp = &*raw.as_ptr();
            let ops = &(*qp.context).ops;
            (qp.qp_num, (ops.post_send, ops.post_recv))
        };
        let (Some(post_send_fn), Some(post_recv_fn)) = ops else {
            // SAFETY: created above, destroyed exactly once.
            unsafe { (v.destroy_qp)(raw.as_ptr()) };
            return Err(VerbsError::invalid(format!(
                "{}: provider has no post_send/post_recv in ibv_context.ops",
                pd.context().name()
            )));
        };
        Ok(RcQp {
            raw,
            post_send_fn,
            post_recv_fn,
            qpn,
            port,
            caps,
            max_inline,
            pd: Arc::clone(pd),
            _send_cq: Arc::clone(send_cq),
            _recv_cq: Arc::clone(recv_cq),
            srq: srq.map(Arc::clone),
        })
    }

    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    pub fn port(&self) -> u8 {
        self.port
    }

    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The shared receive queue this QP draws from (None: its own receive queue).
    pub fn srq(&self) -> Option<&Arc<SharedReceiveQueue>> {
        self.srq.as_ref()
    }

    pub fn device(&self) -> &str {
        self.pd.context().name()
    }

    fn modify(&self, attr: &mut ib::ibv_qp_attr, mask: u32, step: &'static str) -> Result<()> {
        // SAFETY: live QP; `attr` is initialised for every field named in `mask`.
        let rc =
            unsafe { (self.pd.context().verbs().modify_qp)(self.raw.as_ptr(), attr, mask as i32) };
        if rc != 0 {
            let errno = if rc > 0 {
                rc
            } else {
                std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
            };
            return Err(VerbsError::Call {
                op: step,
                device: format!("{} (QP {})", self.device(), self.qpn),
                errno,
            });
        }
        Ok(())
    }

    /// Connects this QP to `remote`: RESET -> INIT -> RTR -> RTS. `local` is this QP's own
    /// endpoint (its PSN and MTU), `sgid_index` the local GID index to send from.
    pub fn connect(
        &self,
        local: &QpEndpoint,
        sgid_index: u32,
        remote: &QpEndpoint,
        tuning: &QpTuning,
    ) -> Result<()> {
        self.connect_with_flow_label(local, sgid_index, remote, tuning, 0)
    }

    /// As `connect`, giving the GRH a 20-bit `flow_label` at RTR (0: none, the driver's choice).
    /// On RoCEv2, mlx5 turns a non-zero flow label into the UDP source port
    /// `0xC000 | (fl & 0x3fff) ^ (fl >> 14)` (Linux `mlx5_set_path_udp_sport`,
    /// `rdma_flow_label_to_udp_sport`), so `port & 0x3fff` pins that port; rxe keeps its
    /// QPN-derived port and only carries the label in an IPv6 header. Ignored on IB (LID) paths.
    pub fn connect_with_flow_label(
        &self,
        local: &QpEndpoint,
        sgid_index: u32,
        remote: &QpEndpoint,
        tuning: &QpTuning,
        flow_label: u32,
    ) -> Result<()> {
        if flow_label > 0xF_FFFF {
            return Err(VerbsError::invalid(format!(
                "QP {}: flow label {flow_label:#x} is wider than 20 bits",
                self.qpn
            )));
        }
        let path_mtu = mtu_code(local.mtu.min(remote.mtu)).ok_or_else(|| {
            VerbsError::invalid(format!(
                "QP {}: no common MTU (local {}, remote {})",
                self.qpn, local.mtu, remote.mtu
            ))
        })?;
        let sgid = u8::try_from(sgid_index)
            .map_err(|_| VerbsError::invalid(format!("GID index {sgid_index} above 255")))?;

        // SAFETY: plain old data, zero is valid for every field.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ib::IBV_QPS_INIT;
        a.pkey_index = tuning.pkey_index;
        a.port_num = self.port;
        a.qp_access_flags =
            ib::IBV_ACCESS_LOCAL_WRITE | ib::IBV_ACCESS_REMOTE_WRITE | ib::IBV_ACCESS_REMOTE_READ;
        let mask =
            ib::IBV_QP_STATE | ib::IBV_QP_PKEY_INDEX | ib::IBV_QP_PORT | ib::IBV_QP_ACCESS_FLAGS;
        self.modify(&mut a, mask, "ibv_modify_qp(INIT)")?;

        // SAFETY: as above.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ib::IBV_QPS_RTR;
        a.path_mtu = path_mtu;
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.sl = tuning.service_level;
        a.ah_attr.port_num = self.port;
        if remote.lid == 0 {
            // RoCE (or routed IB): address by GID with a global route header
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = remote.gid;
            a.ah_attr.grh.sgid_index = sgid;
            a.ah_attr.grh.hop_limit = 255;
            a.ah_attr.grh.traffic_class = tuning.traffic_class;
            a.ah_attr.grh.flow_label = flow_label;
        }
        let mask = ib::IBV_QP_STATE
            | ib::IBV_QP_AV
            | ib::IBV_QP_PATH_MTU
            | ib::IBV_QP_DEST_QPN
            | ib::IBV_QP_RQ_PSN
            | ib::IBV_QP_MAX_DEST_RD_ATOMIC
            | ib::IBV_QP_MIN_RNR_TIMER;
        self.modify(&mut a, mask, "ibv_modify_qp(RTR)")?;

        // SAFETY: as above.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ib::IBV_QPS_RTS;
        a.timeout = tuning.timeout;
        a.retry_cnt = tuning.retry_cnt;
        a.rnr_retry = 7; // infinite: a receiver short of posted receives slows us, never fails us
        a.sq_psn = local.psn;
        a.max_rd_atomic = 1;
        let mask = ib::IBV_QP_STATE
            | ib::IBV_QP_TIMEOUT
            | ib::IBV_QP_RETRY_CNT
            | ib::IBV_QP_RNR_RETRY
            | ib::IBV_QP_SQ_PSN
            | ib::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(&mut a, mask, "ibv_modify_qp(RTS)")
    }

    /// Moves the QP to the error state: outstanding work requests complete as flushed.
    pub fn set_error(&self) -> Result<()> {
        // SAFETY: plain old data, zero is valid for every field.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ib::IBV_QPS_ERR;
        self.modify(&mut a, ib::IBV_QP_STATE, "ibv_modify_qp(ERR)")
    }

    /// `ibv_query_qp` of the attributes in `mask`.
    fn query(&self, mask: u32) -> Result<ib::ibv_qp_attr> {
        // SAFETY: plain old data, zero is valid for every field.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut init: ib::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live QP and valid out-pointers.
        let rc = unsafe {
            (self.pd.context().verbs().query_qp)(self.raw.as_ptr(), &mut a, mask as i32, &mut init)
        };
        if rc != 0 {
            return Err(VerbsError::from_rc("ibv_query_qp", self.device(), rc));
        }
        Ok(a)
    }

    /// The GRH traffic class of the QP's address vector as the device reports it (ibv_query_qp
    /// IBV_QP_AV): what its packets carry, not what was asked for.
    pub fn traffic_class(&self) -> Result<u8> {
        Ok(self.query(ib::IBV_QP_AV)?.ah_attr.grh.traffic_class)
    }

    /// The GRH flow label of the QP's address vector as the device reports it (ibv_query_qp
    /// IBV_QP_AV); on mlx5 RoCEv2 it is what chose the UDP source port.
    pub fn flow_label(&self) -> Result<u32> {
        Ok(self.query(ib::IBV_QP_AV)?.ah_attr.grh.flow_label)
    }

    /// Moves this QP (in RTS) to UDP source port `port` with `mlx5dv_modify_qp_udp_sport`:
    /// Ok(true) done, Ok(false) not available here (no libmlx5, or the device lacks
    /// `rts2rts_qp_udp_sport`: EOPNOTSUPP/EINVAL), so the caller replaces the QP instead.
    pub fn set_udp_sport(&self, port: u16) -> Result<bool> {
        // mlx5dv calls assume an mlx5 QP: never hand them another provider's (rxe, ...).
        if !super::sys::mlx5dv::is_mlx5_device(self.device()) {
            return Ok(false);
        }
        let Some(f) = super::sys::mlx5dv::modify_qp_udp_sport() else {
            return Ok(false);
        };
        // SAFETY: live QP; the function only reads the QP handle and the port.
        let rc = unsafe { f(self.raw.as_ptr(), port) };
        if rc == 0 {
            return Ok(true);
        }
        let errno = if rc > 0 {
            rc
        } else {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
        };
        if matches!(errno, libc::EOPNOTSUPP | libc::EINVAL) {
            return Ok(false);
        }
        Err(VerbsError::Call {
            op: "mlx5dv_modify_qp_udp_sport",
            device: format!("{} (QP {})", self.device(), self.qpn),
            errno,
        })
    }

    /// Current state as the device reports it.
    pub fn state(&self) -> Result<QpState> {
        let a = self.query(ib::IBV_QP_STATE)?;
        Ok(match a.qp_state {
            ib::IBV_QPS_RESET => QpState::Reset,
            ib::IBV_QPS_INIT => QpState::Init,
            ib::IBV_QPS_RTR => QpState::Rtr,
            ib::IBV_QPS_RTS => QpState::Rts,
            ib::IBV_QPS_SQD => QpState::Sqd,
            ib::IBV_QPS_SQE => QpState::Sqe,
            ib::IBV_QPS_ERR => QpState::Error,
            _ => QpState::Unknown,
        })
    }

    /// Posts an RDMA write of `local` (empty slice = zero-length write) to `remote`, with the
    /// immediate `imm` (host order; sent in network order as verbs requires) when given.
    /// `signaled` asks for a send completion. Never blocks; fails when the send queue is full.
    pub fn post_write(
        &self,
        wr_id: u64,
        local: LocalSlice,
        remote: RemoteSlice,
        imm: Option<u32>,
        signaled: bool,
    ) -> Result<()> {
        let mut sge = ib::ibv_sge {
            addr: local.addr,
            length: local.len,
            lkey: local.lkey,
        };
        // SAFETY: plain old data, zero is valid for every field.
        let mut wr: ib::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.next = std::ptr::null_mut();
        if local.len > 0 {
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
        }
        match imm {
            Some(v) => {
                wr.opcode = ib::IBV_WR_RDMA_WRITE_WITH_IMM;
                wr.imm_data_invalidated_rkey_union.imm_data = v.to_be();
            }
            None => wr.opcode = ib::IBV_WR_RDMA_WRITE,
        }
        if signaled {
            wr.send_flags = ib::IBV_SEND_SIGNALED;
        }
        if local.len > 0 && local.len <= self.max_inline {
            // The provider copies the bytes into the WQE at post time: no DMA read of them
            // later (the lkey is not used).
            wr.send_flags |= ib::IBV_SEND_INLINE;
        }
        wr.wr.rdma = ib::ibv_send_wr_rdma {
            remote_addr: remote.addr,
            rkey: remote.rkey,
        };
        // SAFETY: `wr` and `sge` live across the call (the provider copies them); the local
        // range was registered (LocalSlice comes from a MemoryRegion).
        unsafe { self.post_send(&mut wr, "ibv_post_send") }
    }

    /// Posts one send work request through the ops entry verbs.h's inline ibv_post_send calls.
    ///
    /// # Safety
    /// `wr` and every scatter-gather entry it points to stay valid for the call, and their local
    /// ranges are registered on this QP's protection domain.
    unsafe fn post_send(&self, wr: &mut ib::ibv_send_wr, op: &'static str) -> Result<()> {
        let mut bad: *mut ib::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: live QP; the caller keeps `wr` and its sges valid across the call.
        let rc = unsafe { (self.post_send_fn)(self.raw.as_ptr(), wr, &mut bad) };
        if rc != 0 {
            return Err(VerbsError::Call {
                op,
                device: format!("{} (QP {})", self.device(), self.qpn),
                errno: rc.abs(),
            });
        }
        Ok(())
    }

    /// Posts a signaled RDMA READ of `local.len` bytes from `remote` into `local` (iflush's
    /// read through the loopback QP, as net_ib's ncclIbIflush posts it). Never blocks.
    pub(crate) fn post_read(
        &self,
        wr_id: u64,
        local: LocalSlice,
        remote: RemoteSlice,
    ) -> Result<()> {
        let mut sge = ib::ibv_sge {
            addr: local.addr,
            length: local.len,
            lkey: local.lkey,
        };
        // SAFETY: plain old data, zero is valid for every field.
        let mut wr: ib::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ib::IBV_WR_RDMA_READ;
        wr.send_flags = ib::IBV_SEND_SIGNALED;
        wr.wr.rdma = ib::ibv_send_wr_rdma {
            remote_addr: remote.addr,
            rkey: remote.rkey,
        };
        // SAFETY: as in post_write: `wr` and `sge` live across the call, the local range is
        // registered with local write access.
        unsafe { self.post_send(&mut wr, "ibv_post_send(RDMA_READ)") }
    }

    /// Posts one zero-length receive (consumed by an incoming WRITE_WITH_IMM); refused for a QP
    /// on a shared receive queue (post to the SRQ instead).
    pub fn post_recv(&self, wr_id: u64) -> Result<()> {
        if self.srq.is_some() {
            return Err(VerbsError::invalid(format!(
                "{} (QP {}): receives of this QP come from its shared receive queue",
                self.device(),
                self.qpn
            )));
        }
        // SAFETY: plain old data, zero is valid for every field.
        let mut wr: ib::ibv_recv_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.next = std::ptr::null_mut();
        wr.sg_list = std::ptr::null_mut();
        wr.num_sge = 0;
        let mut bad: *mut ib::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: live QP; `wr` lives across the call and has no SGEs; the ops entry is the one
        // verbs.h's inline ibv_post_recv calls.
        let rc = unsafe { (self.post_recv_fn)(self.raw.as_ptr(), &mut wr, &mut bad) };
        if rc != 0 {
            return Err(VerbsError::Call {
                op: "ibv_post_recv",
                device: format!("{} (QP {})", self.device(), self.qpn),
                errno: rc.abs(),
            });
        }
        Ok(())
    }
}

impl Drop for RcQp {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed exactly once; CQs and PD outlive it (Arcs held).
        unsafe {
            (self.pd.context().verbs().destroy_qp)(self.raw.as_ptr());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_round_trips() {
        let ep = QpEndpoint {
            qpn: 0x12,
            psn: 0xabcdef,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 1],
            lid: 0,
            mtu: 4096,
        };
        let bytes = ep.encode();
        assert_eq!(QpEndpoint::decode(&bytes), Ok(ep));
    }

    #[test]
    fn endpoint_garbage_rejected() {
        let ep = QpEndpoint {
            qpn: 1,
            psn: 1,
            gid: [0; 16],
            lid: 0,
            mtu: 1024,
        };
        let mut b = ep.encode();
        assert!(QpEndpoint::decode(&b[..31]).is_err());
        b[26] = 0xdc; // MTU 1500-ish
        b[27] = 0x05;
        assert!(QpEndpoint::decode(&b).is_err());
        let mut b = ep.encode();
        b[3] = 1; // qpn above 24 bits
        assert!(QpEndpoint::decode(&b).is_err());
    }
}
