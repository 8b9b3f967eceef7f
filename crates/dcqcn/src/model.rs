//! DCQCN reaction-point model: the sending rate of one QP as a pure state machine driven by the
//! mlx5 firmware parameters; the caller passes time (ns) and bytes sent, nothing reads a clock.
//!
//! Equations (DCQCN, Zhu et al. SIGCOMM 2015, in the firmware's integer units):
//! * CNP (at most one cut per `rate_reduce_monitor_period`, later CNPs in the period are ignored):
//!   a flow not yet recovering starts with `alpha = initial_alpha` (and jumps to
//!   `rate_to_set_on_first_cnp` when that is non-zero); `target = current` when `clamp_tgt_rate`
//!   is set, on the first cut, or when the rate increased since the last cut (timer-driven
//!   increases count only with `clamp_tgt_rate_ati`); then
//!   `current = current * (1 - alpha / 2^gd)`, never below `min_dec_fac` % of the old rate nor
//!   below `min_rate`; stage counters, byte counter and the increase timer restart.
//! * Alpha, by [`AlphaSchedule`] (up: `alpha = ((1024 - g) * alpha + 1024 * g) / 1024`, down:
//!   `alpha = (1024 - g) * alpha / 1024`, integer, floor, in both schedules):
//!   - `PerCnp` (the paper): up right after each cut; down every `dce_tcp_rtt` us without a CNP,
//!     only while recovering, the period restarting at each cut.
//!   - `PerPeriod` (NVIDIA's documentation): unchanged at a cut (which uses the alpha of the last
//!     period's end); a period timer starts at the cut that begins recovery and then runs every
//!     `dce_tcp_rtt` us, not restarted by later cuts; any CNP in a period (the cutting one, and
//!     one ignored inside the monitor period too) marks it; at its end alpha goes up if marked,
//!     down if not. A CNP at the very end of a period belongs to the next. When recovery ends
//!     the timer stops and the open period is dropped (the next first CNP resets alpha anyway).
//!     `dce_tcp_rtt` = 0 (outside the firmware's 1..131071) means no period: alpha stays at
//!     `initial_alpha`. Periods with alpha 0 and no CNP change nothing and are skipped in one step.
//! * Increase events: the timer (`time_reset` us) increments T, every `byte_reset * 64` bytes
//!   sent increments B; with F = `threshold`, after incrementing: fast recovery while
//!   max(T, B) < F (`current = (target + current) / 2`); additive once one counter reached F
//!   (`target += ai_rate`, then the fast-recovery step); hyper once both reached F
//!   (`target += i * hai_rate` with i = min(T, B) - F + 1, then the fast-recovery step). The
//!   target never exceeds the maximum rate (`max_rate`, 0 = line rate); reaching it ends recovery.
//! * g from `dce_tcp_g` (1/1024 units) follows [`GConvention`]. A zero `time_reset`,
//!   `byte_reset` or `dce_tcp_rtt` disables that timer / counter.

/// How the raw `dce_tcp_g` integer maps to the EWMA gain g (in 1/1024 units): sources disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GConvention {
    /// g = (1024 - dce_tcp_g) / 1024, as NVIDIA's current documentation reads (1019 -> 5/1024).
    OneMinus,
    /// g = dce_tcp_g / 1024, the literal reading of the field (1019 -> 1019/1024).
    Direct,
}

/// When alpha is updated: the DCQCN paper and NVIDIA's documentation describe different schedules
/// (docs/records/simulation.md, "DCQCN parameters: what the model assumes"); the formulas are the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlphaSchedule {
    /// The paper's form (Zhu et al. SIGCOMM 2015; ../shared/notes/reference-facts.md section 4):
    /// up at each CNP that cuts, down once per `dce_tcp_rtt` without a CNP, the period
    /// restarting at each cut. The `paper` simulator profile's schedule.
    PerCnp,
    /// NVIDIA's form (DOCA documentation, "DCQCN CC Parameters", `DcQcnDceAlphaUpdatePeriod` =
    /// `dce_tcp_rtt`; the Mellanox community page "DCQCN Parameters", DOC-2790): once per
    /// `dce_tcp_rtt` whether or not a CNP arrived, up when at least one CNP was received in the
    /// period, down otherwise. [`RpParams::firmware_defaults`]' schedule.
    PerPeriod,
}

impl AlphaSchedule {
    /// `per-cnp` or `per-period` (the `dqplb sim --alpha-update` values).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "per-cnp" => Some(AlphaSchedule::PerCnp),
            "per-period" => Some(AlphaSchedule::PerPeriod),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AlphaSchedule::PerCnp => "per-cnp",
            AlphaSchedule::PerPeriod => "per-period",
        }
    }
}

/// Reaction-point parameters, named after the cc_params files (units as the firmware uses).
#[derive(Debug, Clone, PartialEq)]
pub struct RpParams {
    pub clamp_tgt_rate: bool,
    pub clamp_tgt_rate_ati: bool,
    /// Increase timer period, microseconds (0 = no timer).
    pub time_reset_us: u64,
    /// Byte-counter period in 64-byte units (0 = no byte counter).
    pub byte_reset_64b: u64,
    /// F, the stage threshold.
    pub threshold: u32,
    pub ai_rate_mbps: u64,
    /// 0 means line rate.
    pub max_rate_mbps: u64,
    pub hai_rate_mbps: u64,
    /// Percent of the old rate a single cut may not go below.
    pub min_dec_fac_pct: u64,
    pub min_rate_mbps: u64,
    /// 0 = disabled.
    pub rate_to_set_on_first_cnp_mbps: u64,
    /// Raw firmware value, 1/1024 units, read through `g_convention`.
    pub dce_tcp_g: u32,
    /// Alpha timer period, microseconds (0 = no alpha decay).
    pub dce_tcp_rtt_us: u64,
    pub rate_reduce_monitor_period_us: u64,
    /// 1/1024 units.
    pub initial_alpha: u32,
    /// log2 of the cut divisor: cut = alpha / 2^gd (11 reproduces the paper's alpha / 2).
    pub gd: u32,
    pub g_convention: GConvention,
    /// When alpha changes (not a cc_params file: the firmware's schedule is fixed).
    pub alpha_schedule: AlphaSchedule,
}

impl RpParams {
    /// The ConnectX-4 Lx / ConnectX-5 firmware defaults, with the vendor-documented per-period
    /// alpha update.
    pub fn firmware_defaults() -> Self {
        RpParams {
            clamp_tgt_rate: false,
            clamp_tgt_rate_ati: true,
            time_reset_us: 300,
            byte_reset_64b: 32767,
            threshold: 1,
            ai_rate_mbps: 5,
            max_rate_mbps: 0,
            hai_rate_mbps: 50,
            min_dec_fac_pct: 50,
            min_rate_mbps: 1,
            rate_to_set_on_first_cnp_mbps: 0,
            dce_tcp_g: 1019,
            dce_tcp_rtt_us: 1,
            rate_reduce_monitor_period_us: 4,
            initial_alpha: 1023,
            gd: 11,
            g_convention: GConvention::OneMinus,
            alpha_schedule: AlphaSchedule::PerPeriod,
        }
    }

    /// g in 1/1024 units under the configured convention, clamped to 0..=1024.
    pub fn g_fixed(&self) -> u64 {
        let raw = u64::from(self.dce_tcp_g.min(1024));
        match self.g_convention {
            GConvention::OneMinus => 1024 - raw,
            GConvention::Direct => raw,
        }
    }
}

/// Which increase stage an event applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    FastRecovery,
    Additive,
    /// Hyper increase with its multiplier i.
    Hyper(u32),
}

/// What a CNP did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CnpOutcome {
    /// The rate was cut.
    Cut,
    /// Arrived within `rate_reduce_monitor_period` of the last cut: no effect.
    Ignored,
}

/// One QP's reaction point.
#[derive(Debug, Clone)]
pub struct ReactionPoint {
    p: RpParams,
    max_mbps: f64,
    now_ns: u64,
    current: f64,
    target: f64,
    alpha: u64,
    t_stage: u32,
    b_stage: u32,
    recovering: bool,
    last_cut_ns: Option<u64>,
    next_increase_ns: Option<u64>,
    next_alpha_ns: Option<u64>,
    /// `PerPeriod`: a CNP arrived in the open alpha period.
    period_marked: bool,
    bytes: u64,
    increased_since_cut: bool,
    last_stage: Option<Stage>,
    cuts: u64,
    ignored: u64,
}

const US: u64 = 1_000;

impl ReactionPoint {
    /// A QP sending at its maximum rate (`max_rate`, or `line_rate_mbps` when that is 0 or larger).
    pub fn new(params: RpParams, line_rate_mbps: f64) -> Self {
        let line = if line_rate_mbps.is_finite() && line_rate_mbps > 0.0 {
            line_rate_mbps
        } else {
            0.0
        };
        let max_mbps = if params.max_rate_mbps == 0 {
            line
        } else {
            (params.max_rate_mbps as f64).min(line)
        };
        let alpha = u64::from(params.initial_alpha.min(1024));
        ReactionPoint {
            p: params,
            max_mbps,
            now_ns: 0,
            current: max_mbps,
            target: max_mbps,
            alpha,
            t_stage: 0,
            b_stage: 0,
            recovering: false,
            last_cut_ns: None,
            next_increase_ns: None,
            next_alpha_ns: None,
            period_marked: false,
            bytes: 0,
            increased_since_cut: false,
            last_stage: None,
            cuts: 0,
            ignored: 0,
        }
    }

    pub fn params(&self) -> &RpParams {
        &self.p
    }
    /// Current sending rate, Mb/s.
    pub fn rate_mbps(&self) -> f64 {
        self.current
    }
    /// Target rate, Mb/s.
    pub fn target_mbps(&self) -> f64 {
        self.target
    }
    /// The rate recovery ends at, Mb/s.
    pub fn max_rate_mbps(&self) -> f64 {
        self.max_mbps
    }
    /// Alpha in 1/1024 units.
    pub fn alpha(&self) -> u64 {
        self.alpha
    }
    /// (T, B): timer and byte-counter stage counts since the last cut.
    pub fn stages(&self) -> (u32, u32) {
        (self.t_stage, self.b_stage)
    }
    /// True between a cut and the return to the maximum rate.
    pub fn is_recovering(&self) -> bool {
        self.recovering
    }
    /// Stage of the most recent increase event, if any since the last cut.
    pub fn last_stage(&self) -> Option<Stage> {
        self.last_stage
    }
    /// Model time, ns (the latest time passed in).
    pub(crate) fn now_ns(&self) -> u64 {
        self.now_ns
    }
    /// (cuts, ignored CNPs) so far.
    pub fn cnp_counts(&self) -> (u64, u64) {
        (self.cuts, self.ignored)
    }
    /// Bytes still to send before the next byte-counter event, `None` when none is pending.
    pub(crate) fn bytes_to_next_byte_event(&self) -> Option<u64> {
        if !self.recovering || self.p.byte_reset_64b == 0 {
            return None;
        }
        Some(self.byte_period().saturating_sub(self.bytes).max(1))
    }
    /// Time of the next increase-timer event (the only timer that raises the rate), `None` when
    /// it does not run.
    pub fn next_increase_ns(&self) -> Option<u64> {
        self.next_increase_ns
    }
    /// Time of the next timer (increase or alpha) event, `None` when no timer runs.
    pub fn next_timer_ns(&self) -> Option<u64> {
        match (self.next_increase_ns, self.next_alpha_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn byte_period(&self) -> u64 {
        self.p.byte_reset_64b.saturating_mul(64)
    }

    /// Applies every timer event due at or before `now_ns`. Time never goes backwards: an
    /// earlier `now_ns` than already seen is treated as the current time.
    pub fn advance_to(&mut self, now_ns: u64) {
        let now_ns = now_ns.max(self.now_ns);
        loop {
            let due = match self.next_timer_ns() {
                Some(t) if t <= now_ns => t,
                _ => break,
            };
            self.now_ns = due;
            if self.next_alpha_ns == Some(due) {
                self.alpha_timer(due, now_ns);
            }
            if self.next_increase_ns == Some(due) {
                self.next_increase_ns = Some(due + self.p.time_reset_us * US);
                self.t_stage = self.t_stage.saturating_add(1);
                if self.p.clamp_tgt_rate_ati {
                    self.increased_since_cut = true;
                }
                self.increase();
            }
        }
        self.now_ns = now_ns;
    }

    /// Records `bytes` sent up to `now_ns` (timers due by then are applied first); each full
    /// `byte_reset * 64` bytes is one byte-counter increase event. Returns how many fired.
    pub fn on_bytes_sent(&mut self, now_ns: u64, bytes: u64) -> u32 {
        self.advance_to(now_ns);
        if !self.recovering || self.p.byte_reset_64b == 0 {
            return 0;
        }
        let period = self.byte_period();
        self.bytes = self.bytes.saturating_add(bytes);
        let mut fired = 0;
        while self.recovering && self.bytes >= period {
            self.bytes -= period;
            self.b_stage = self.b_stage.saturating_add(1);
            self.increased_since_cut = true;
            self.increase();
            fired += 1;
        }
        if !self.recovering {
            self.bytes = 0;
        }
        fired
    }

    /// A CNP arrives at `now_ns` (timers due by then are applied first).
    pub fn on_cnp(&mut self, now_ns: u64) -> CnpOutcome {
        self.advance_to(now_ns);
        let now = self.now_ns;
        if let Some(last) = self.last_cut_ns {
            if now < last.saturating_add(self.p.rate_reduce_monitor_period_us * US) {
                self.ignored += 1;
                self.period_marked |= self.next_alpha_ns.is_some() && self.per_period();
                return CnpOutcome::Ignored;
            }
        }
        let old = self.current;
        if !self.recovering {
            self.alpha = u64::from(self.p.initial_alpha.min(1024));
            self.target = self.current;
        } else if self.p.clamp_tgt_rate || self.increased_since_cut {
            self.target = self.current;
        }
        let first_jump = !self.recovering && self.p.rate_to_set_on_first_cnp_mbps > 0;
        let new = if first_jump {
            (self.p.rate_to_set_on_first_cnp_mbps as f64).min(self.max_mbps)
        } else {
            let divisor = 2f64.powi(self.p.gd.min(60) as i32);
            let cut = old * (1.0 - self.alpha as f64 / divisor);
            let floor = old * (self.p.min_dec_fac_pct.min(100) as f64) / 100.0;
            cut.max(floor)
        };
        self.current = new.max(self.p.min_rate_mbps as f64).min(self.max_mbps);
        if !self.per_period() {
            let g = self.p.g_fixed();
            self.alpha = ((1024 - g) * self.alpha + 1024 * g) / 1024;
        }
        self.recovering = self.current < self.max_mbps;
        self.t_stage = 0;
        self.b_stage = 0;
        self.bytes = 0;
        self.increased_since_cut = false;
        self.last_stage = None;
        self.last_cut_ns = Some(now);
        self.cuts += 1;
        self.restart_timers(now);
        CnpOutcome::Cut
    }

    fn restart_timers(&mut self, now: u64) {
        self.next_increase_ns = if self.recovering && self.p.time_reset_us > 0 {
            Some(now + self.p.time_reset_us * US)
        } else {
            None
        };
        if self.per_period() {
            // The period timer runs on from the cut that began recovery; this CNP marks it.
            if !self.alpha_periods() {
                self.next_alpha_ns = None;
            } else if self.next_alpha_ns.is_none() {
                self.next_alpha_ns = Some(now + self.p.dce_tcp_rtt_us * US);
            }
            self.period_marked = self.next_alpha_ns.is_some();
            return;
        }
        self.next_alpha_ns = if self.alpha_decays() {
            Some(now + self.p.dce_tcp_rtt_us * US)
        } else {
            None
        };
    }

    fn per_period(&self) -> bool {
        self.p.alpha_schedule == AlphaSchedule::PerPeriod
    }

    fn alpha_decays(&self) -> bool {
        self.recovering && self.p.dce_tcp_rtt_us > 0 && self.alpha > 0 && self.p.g_fixed() > 0
    }

    /// `PerPeriod`: whether the period timer runs (alpha 0 still rises at a marked period).
    fn alpha_periods(&self) -> bool {
        self.recovering && self.p.dce_tcp_rtt_us > 0 && self.p.g_fixed() > 0
    }

    /// The alpha timer due at `due`, applied while advancing to `until`.
    fn alpha_timer(&mut self, due: u64, until: u64) {
        let g = self.p.g_fixed();
        if !self.per_period() {
            self.alpha = (1024 - g) * self.alpha / 1024;
            self.next_alpha_ns = if self.alpha_decays() {
                Some(due + self.p.dce_tcp_rtt_us * US)
            } else {
                None
            };
            return;
        }
        let period = self.p.dce_tcp_rtt_us * US;
        if self.period_marked {
            self.alpha = ((1024 - g) * self.alpha + 1024 * g) / 1024;
        } else if self.alpha > 0 {
            self.alpha = (1024 - g) * self.alpha / 1024;
        } else {
            // Alpha 0, no CNP: every period up to now leaves it 0; go to the first one after.
            let k = until.saturating_sub(due) / period + 1;
            self.next_alpha_ns = Some(due.saturating_add(k.saturating_mul(period)));
            return;
        }
        self.period_marked = false;
        self.next_alpha_ns = Some(due + period);
    }

    fn increase(&mut self) {
        let f = self.p.threshold;
        let (t, b) = (self.t_stage, self.b_stage);
        let stage = if t.max(b) < f {
            Stage::FastRecovery
        } else if t.min(b) >= f {
            Stage::Hyper(t.min(b) - f + 1)
        } else {
            Stage::Additive
        };
        match stage {
            Stage::FastRecovery => {}
            Stage::Additive => self.target += self.p.ai_rate_mbps as f64,
            Stage::Hyper(i) => self.target += f64::from(i) * self.p.hai_rate_mbps as f64,
        }
        self.target = self.target.min(self.max_mbps);
        self.current = ((self.target + self.current) / 2.0).min(self.max_mbps);
        self.last_stage = Some(stage);
        // Halving converges but never lands exactly: within a millionth of a Mb/s is there.
        if self.max_mbps - self.current <= 1e-6 {
            self.current = self.max_mbps;
            self.target = self.max_mbps;
            self.recovering = false;
            self.next_increase_ns = None;
            self.next_alpha_ns = None;
            self.period_marked = false;
            self.t_stage = 0;
            self.b_stage = 0;
            self.bytes = 0;
        }
    }
}
