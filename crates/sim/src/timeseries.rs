//! P mode's time series: per data QP (DCQCN rate, segments outstanding, bytes sent, CE marks
//! received, CNPs) and per link (backlog, bytes, marks, PFC pauses), sampled every `sample_ps`.

use std::io::{self, Write};

use super::topology::{LinkKind, Ps};

/// What a row describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsKind {
    /// Data QP `qp` of connection `id`.
    Qp,
    /// Link `id` of the rail (a switch egress queue).
    Link(LinkKind),
}

impl TsKind {
    pub fn name(self) -> &'static str {
        match self {
            TsKind::Qp => "qp",
            TsKind::Link(LinkKind::HostUp) => "host-up",
            TsKind::Link(LinkKind::HostDown) => "host-down",
            TsKind::Link(LinkKind::LeafUp) => "leaf-up",
            TsKind::Link(LinkKind::SpineDown) => "spine-down",
            TsKind::Link(LinkKind::AggUp) => "agg-up",
            TsKind::Link(LinkKind::CoreDown) => "core-down",
        }
    }
}

/// One sample of one QP or link; counters are cumulative since the phase started.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TsRow {
    pub t_ps: Ps,
    pub rail: u32,
    pub phase: u32,
    pub kind: TsKind,
    /// Connection (QP rows) or link id (link rows).
    pub id: u32,
    /// Data QP index within the connection (0 for links).
    pub qp: u32,
    /// QP rows: the reaction point's rate now.
    pub rate_gbps: f64,
    /// QP rows: segments in flight on the QP (engine view).
    pub outstanding: u32,
    /// QP rows: payload bytes sent; link rows: bytes carried.
    pub bytes: u64,
    /// Link rows: bytes queued and not yet being sent.
    pub queue_bytes: u64,
    /// QP rows: CE-marked packets received; link rows: packets this link marked.
    pub ecn_marks: u64,
    /// QP rows: CNPs received by the sender.
    pub cnps: u64,
    /// Link rows: PFC pauses this link received (its sender stopped).
    pub pfc_pauses: u64,
    /// Lossy P-mode runs (`--buffer-kb`): QP rows: this QP's packets tail-dropped anywhere;
    /// link rows: packets this egress dropped.
    pub drops: u64,
    /// QP rows: packets this QP sent again (go-back-N).
    pub resent: u64,
}

impl TsRow {
    /// A QP row at `t_ps` of `rail` and `phase` with every counter zero (rows fill in theirs).
    pub fn blank(t_ps: Ps, rail: u32, phase: u32) -> TsRow {
        TsRow {
            t_ps,
            rail,
            phase,
            kind: TsKind::Qp,
            id: 0,
            qp: 0,
            rate_gbps: 0.0,
            outstanding: 0,
            bytes: 0,
            queue_bytes: 0,
            ecn_marks: 0,
            cnps: 0,
            pfc_pauses: 0,
            drops: 0,
            resent: 0,
        }
    }
}

/// Header of [`write_csv`]'s output (after the caller's prefix columns).
pub const CSV_HEADER: &str =
    "t_us,rail,phase,kind,id,qp,rate_gbps,outstanding,bytes,queue_bytes,ecn_marks,cnps,pfc_pauses,drops,resent";

/// Writes `rows` as CSV lines, each starting with `prefix` (e.g. "dqplb,8,"; may be empty).
pub fn write_csv<W: Write>(w: &mut W, prefix: &str, rows: &[TsRow]) -> io::Result<()> {
    for r in rows {
        writeln!(
            w,
            "{prefix}{:.3},{},{},{},{},{},{:.3},{},{},{},{},{},{},{},{}",
            r.t_ps as f64 / 1e6,
            r.rail,
            r.phase,
            r.kind.name(),
            r.id,
            r.qp,
            r.rate_gbps,
            r.outstanding,
            r.bytes,
            r.queue_bytes,
            r.ecn_marks,
            r.cnps,
            r.pfc_pauses,
            r.drops,
            r.resent
        )?;
    }
    Ok(())
}

/// Goodput in Gb/s of QP `qp` of connection `conn` (rail 0, phase 0) between the samples at
/// `t0` and `t1` (the first samples at or after each); None without both samples.
pub fn qp_gbps(rows: &[TsRow], conn: u32, qp: u32, t0: Ps, t1: Ps) -> Option<f64> {
    let at = |t: Ps| {
        rows.iter().find(|r| {
            r.kind == TsKind::Qp
                && r.rail == 0
                && r.phase == 0
                && r.id == conn
                && r.qp == qp
                && r.t_ps >= t
        })
    };
    let (a, b) = (at(t0)?, at(t1)?);
    if b.t_ps <= a.t_ps {
        return None;
    }
    Some((b.bytes - a.bytes) as f64 * 8.0 / ((b.t_ps - a.t_ps) as f64 / 1e3))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(t: Ps, bytes: u64) -> TsRow {
        TsRow {
            t_ps: t,
            rail: 0,
            phase: 0,
            kind: TsKind::Qp,
            id: 3,
            qp: 1,
            rate_gbps: 100.0,
            outstanding: 2,
            bytes,
            queue_bytes: 0,
            ecn_marks: 0,
            cnps: 0,
            pfc_pauses: 0,
            drops: 0,
            resent: 0,
        }
    }

    #[test]
    fn csv_and_window_goodput() {
        // 125 000 bytes in 10 us = 100 Gb/s.
        let rows = [
            row(0, 0),
            row(10_000_000, 125_000),
            row(20_000_000, 125_000),
        ];
        assert_eq!(qp_gbps(&rows, 3, 1, 0, 10_000_000), Some(100.0));
        assert_eq!(qp_gbps(&rows, 3, 1, 10_000_000, 20_000_000), Some(0.0));
        assert_eq!(qp_gbps(&rows, 3, 0, 0, 10_000_000), None);
        let mut out = Vec::new();
        write_csv(&mut out, "dqplb,1,", &rows[1..2]).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "dqplb,1,10.000,0,0,qp,3,1,100.000,2,125000,0,0,0,0,0,0\n"
        );
    }
}
