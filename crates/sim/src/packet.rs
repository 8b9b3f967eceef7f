//! P mode's parameters (MTU, ECN, CNP interval, the DCQCN profile, PFC, time series) and what a
//! P-mode run counts (packets, marks, CNPs, cuts, deepest queue, pauses, the time series).

use serde::Serialize;

use dqplb_dcqcn::{AlphaSchedule, RpParams};

use super::error::SimError;
use super::loss::LossSpec;
use super::pfc::PfcSpec;
use super::switchq::EcnSpec;
use super::timeseries::TsRow;
use super::topology::Ps;

/// P mode's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct PacketSpec {
    /// Payload bytes per packet (headers are not modelled).
    pub mtu: u32,
    pub ecn: EcnSpec,
    /// The receiver NIC sends at most one CNP per QP per this interval.
    pub cnp_interval_ps: Ps,
    /// Every data QP's reaction point.
    pub rp: RpParams,
    /// Time-series sampling period (0 = no time series).
    pub sample_ps: Ps,
    /// Connection c starts posting at c x this (0 = all at once).
    pub stagger_ps: Ps,
    pub pfc: PfcSpec,
    /// Finite switch buffers and go-back-N (loss.rs); unbounded by default.
    pub loss: LossSpec,
}

impl Default for PacketSpec {
    fn default() -> Self {
        PacketSpec {
            mtu: 4096,
            ecn: EcnSpec::default_for_gbps(400.0),
            // mlx5's np_min_time_between_cnps default (../shared/notes/reference-facts.md, 4).
            cnp_interval_ps: 4_000_000,
            rp: RpParams::firmware_defaults(),
            sample_ps: 0,
            stagger_ps: 0,
            pfc: PfcSpec::default(),
            loss: LossSpec::default(),
        }
    }
}

impl PacketSpec {
    pub fn validate(&self) -> Result<(), SimError> {
        if self.mtu == 0 || self.mtu > 1 << 20 {
            return Err(SimError::Config(format!(
                "MTU {} must be 1 ..= 1048576",
                self.mtu
            )));
        }
        self.ecn.validate()?;
        self.pfc.validate()?;
        self.loss.validate(self.mtu, self.pfc.enabled)
    }
}

/// A named reaction-point profile: `firmware` (the ConnectX-4 Lx/5 defaults of
/// `RpParams::firmware_defaults`) or `paper` (the DCQCN paper's recommended values, Zhu et al.
/// SIGCOMM 2015, as ../shared/notes/reference-facts.md lists them: g = 1/256, alpha and rate
/// timers 55 us, byte counter 10 MB, R_AI 40 Mb/s, F = 5, the paper's per-CNP alpha update;
/// the rest as the firmware's). `firmware` updates alpha per period, as NVIDIA documents.
pub fn dcqcn_profile(name: &str) -> Result<RpParams, String> {
    let fw = RpParams::firmware_defaults();
    match name {
        "firmware" | "mlx5" => Ok(fw),
        "paper" => Ok(RpParams {
            // g = (1024 - dce_tcp_g) / 1024 under the OneMinus reading: 4 / 1024 = 1/256.
            dce_tcp_g: 1020,
            dce_tcp_rtt_us: 55,
            time_reset_us: 55,
            byte_reset_64b: 10_000_000 / 64,
            ai_rate_mbps: 40,
            threshold: 5,
            alpha_schedule: AlphaSchedule::PerCnp,
            ..fw
        }),
        other => Err(format!(
            "unknown DCQCN profile '{other}' (firmware or paper)"
        )),
    }
}

/// What P mode counted (summed over phases and rails).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PacketSummary {
    pub packets: u64,
    pub ecn_marks: u64,
    pub cnps: u64,
    /// CNPs that cut a rate, and those the reaction point ignored (within its monitor period).
    pub rate_cuts: u64,
    pub cnps_ignored: u64,
    /// Deepest switch egress backlog seen, bytes.
    pub max_queue_bytes: u64,
    /// PFC pauses sent (links stopped), and the most bytes any ingress held.
    pub pfc_pauses: u64,
    pub max_ingress_bytes: u64,
    /// Packets the NICs sent (first sends and resends); with a lossy fabric (`--buffer-kb`,
    /// loss.rs) also those dropped at a full switch egress, sent again, NAKs, local ACK
    /// timeouts, and packets a receiver discarded (past a gap, or already received), all 0
    /// when lossless.
    pub sent_packets: u64,
    pub drops: u64,
    pub resent_packets: u64,
    pub naks: u64,
    pub ack_timeouts: u64,
    pub discarded: u64,
    #[serde(skip)]
    pub timeseries: Vec<TsRow>,
}

impl PacketSummary {
    pub fn add(&mut self, o: &PacketSummary) {
        self.packets += o.packets;
        self.ecn_marks += o.ecn_marks;
        self.cnps += o.cnps;
        self.rate_cuts += o.rate_cuts;
        self.cnps_ignored += o.cnps_ignored;
        self.max_queue_bytes = self.max_queue_bytes.max(o.max_queue_bytes);
        self.pfc_pauses += o.pfc_pauses;
        self.max_ingress_bytes = self.max_ingress_bytes.max(o.max_ingress_bytes);
        self.sent_packets += o.sent_packets;
        self.drops += o.drops;
        self.resent_packets += o.resent_packets;
        self.naks += o.naks;
        self.ack_timeouts += o.ack_timeouts;
        self.discarded += o.discarded;
        self.timeseries.extend_from_slice(&o.timeseries);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_and_spec_checks() {
        let fw = dcqcn_profile("firmware").unwrap();
        assert_eq!(fw, RpParams::firmware_defaults());
        let paper = dcqcn_profile("paper").unwrap();
        // g = 1/256 under the model's reading, both timers 55 us, 10 MB, 40 Mb/s, F = 5.
        assert_eq!(paper.g_fixed(), 4);
        assert_eq!((paper.dce_tcp_rtt_us, paper.time_reset_us), (55, 55));
        assert_eq!(paper.byte_reset_64b * 64, 10_000_000);
        assert_eq!((paper.ai_rate_mbps, paper.threshold), (40, 5));
        assert_eq!(paper.hai_rate_mbps, fw.hai_rate_mbps);
        assert_eq!(paper.alpha_schedule, AlphaSchedule::PerCnp);
        assert_eq!(fw.alpha_schedule, AlphaSchedule::PerPeriod);
        assert!(dcqcn_profile("fast")
            .unwrap_err()
            .to_string()
            .contains("firmware or paper"));
        let ok = PacketSpec::default();
        assert!(ok.validate().is_ok());
        assert!(PacketSpec {
            mtu: 0,
            ..ok.clone()
        }
        .validate()
        .is_err());
        let mut pfc = ok.clone();
        pfc.pfc = PfcSpec {
            enabled: true,
            xoff: 100,
            xon: 200,
        };
        assert!(pfc.validate().unwrap_err().to_string().contains("Xon"));
    }
}
