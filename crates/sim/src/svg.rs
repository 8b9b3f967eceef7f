//! Hand-written SVG of a simulation's outputs: % of ideal per policy and q (bars), the uplink
//! collision histogram per rail against Binomial(n, 1/M), and a per-uplink heatmap per rail.

// Plain strings, no crate: the three charts are rectangles, lines and text, and writing them by
// hand keeps every bar's height an exact, testable function of the reported number
// (`PX_PER_PCT`). Every element a test reads carries its number in a `data-*` attribute.

use std::fmt::Write;

use super::conn::SimPolicy;
use super::report::SimResult;

/// Bar chart scale: pixels per percentage point of ideal (100% = 300 px).
pub(crate) const PX_PER_PCT: f64 = 3.0;

const FONT: &str = "font-family=\"sans-serif\" font-size=\"11\"";

/// Escapes text for an SVG text node or attribute.
pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c => o.push(c),
        }
    }
    o
}

/// A finite number for an attribute (0 for NaN or infinities, which SVG cannot take).
pub(crate) fn fin(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

pub(crate) fn open(w: f64, h: f64) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w:.0}\" height=\"{h:.0}\" viewBox=\"0 0 {w:.0} {h:.0}\">\n<rect x=\"0\" y=\"0\" width=\"{w:.0}\" height=\"{h:.0}\" fill=\"white\"/>\n"
    )
}

fn text(s: &mut String, x: f64, y: f64, anchor: &str, t: &str) {
    text_filled(s, x, y, anchor, None, t);
}

/// A text node at (x, y), in `fill` when given (the default black otherwise).
pub(crate) fn text_filled(
    s: &mut String,
    x: f64,
    y: f64,
    anchor: &str,
    fill: Option<&str>,
    t: &str,
) {
    let fill = fill.map_or(String::new(), |f| format!(" fill=\"{f}\""));
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\"{fill} {FONT}>{}</text>",
        fin(x),
        fin(y),
        esc(t)
    );
}

/// Distinct colours for the policies, in a fixed order.
fn policy_colour(p: &str) -> &'static str {
    match p {
        "single-qp" => "#9e9e9e",
        "static-split" => "#4e79a7",
        "round-robin-message" => "#76b7b2",
        "dqplb" => "#e15759",
        "dqplb-rehash" => "#f28e2b",
        "dqplb-led" => "#9c6ade",
        "dqplb-led-rehash" => "#ff9da7",
        "spray" => "#59a14f",
        "lp-split" => "#edc948",
        _ => "#b07aa1",
    }
}

/// Bytes with a binary unit: 268435456 -> "256 MiB".
pub(crate) fn human_bytes(b: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{} {unit}", b >> shift);
        }
    }
    format!("{b} B")
}

/// Wide enough for a line of `chars` characters at the 11 px font (about 6.2 px each).
fn width_for(chars: usize, at_least: f64) -> f64 {
    (40.0 + 6.2 * chars as f64).max(at_least)
}

fn subtitle(r: &SimResult) -> String {
    format!(
        "{} mode, {} of {} {}, {} hosts x {} rails ({} simulated), {} leaves x {} spines, oversub {}, seed {}",
        r.mode,
        r.traffic,
        human_bytes(r.bytes),
        r.placement,
        r.hosts,
        r.rails,
        r.rails_simulated,
        r.leaves,
        r.spines,
        r.oversub,
        r.seed
    )
}

/// (a) % of ideal per run (policy, q) as bars, `pct_of_ideal * PX_PER_PCT` pixels high, with the
/// best split over the hashed paths (100 / `bound_upper`) as a tick over each bar.
pub fn ideal_bars(rows: &[&SimResult]) -> String {
    let (left, top, bw, gap) = (50.0, 40.0, 56.0, 18.0);
    let plot_h = 100.0 * PX_PER_PCT;
    let sub = rows.first().map(|r| subtitle(r)).unwrap_or_default();
    let w = left + rows.len() as f64 * (bw + gap) + gap + 20.0;
    let w = w.max(width_for(sub.len(), 560.0));
    let h = top + plot_h + 70.0;
    let base = top + plot_h;
    let mut s = open(w, h);
    text(&mut s, left, 16.0, "start", "% of ideal per policy and q");
    text(&mut s, left, 30.0, "start", &sub);
    for pct in [0, 25, 50, 75, 100] {
        let y = base - f64::from(pct) * PX_PER_PCT;
        let _ = writeln!(
            s,
            "<line x1=\"{left:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#dddddd\"/>",
            w - 10.0
        );
        text(&mut s, left - 4.0, y + 4.0, "end", &format!("{pct}"));
    }
    for (i, r) in rows.iter().enumerate() {
        let x = left + gap + i as f64 * (bw + gap);
        let pct = fin(r.pct_of_ideal);
        let bh = pct * PX_PER_PCT;
        let _ = writeln!(
            s,
            "<rect class=\"bar\" data-policy=\"{}\" data-qps=\"{}\" data-pct=\"{pct}\" x=\"{x:.1}\" y=\"{:.3}\" width=\"{bw:.1}\" height=\"{bh:.3}\" fill=\"{}\"><title>{} q={}: {pct:.2}% of ideal</title></rect>",
            esc(r.policy.name()),
            r.qps,
            base - bh,
            policy_colour(r.policy.name()),
            esc(r.policy.name()),
            r.qps
        );
        text(
            &mut s,
            x + bw / 2.0,
            base - bh - 4.0,
            "middle",
            &format!("{pct:.1}"),
        );
        if r.bound_upper > 0.0 && r.policy != SimPolicy::Spray {
            let b = (100.0 / r.bound_upper).min(100.0);
            let y = base - b * PX_PER_PCT;
            let _ = writeln!(
                s,
                "<line class=\"bound\" data-pct=\"{b}\" x1=\"{:.1}\" y1=\"{y:.3}\" x2=\"{:.1}\" y2=\"{y:.3}\" stroke=\"black\" stroke-dasharray=\"3,2\"/>",
                x - 3.0,
                x + bw + 3.0
            );
        }
        text(
            &mut s,
            x + bw / 2.0,
            base + 14.0,
            "middle",
            &format!("q={}", r.qps),
        );
        let label = r.policy.name().replace("round-robin-message", "rr-msg");
        text(&mut s, x + bw / 2.0, base + 28.0, "middle", &label);
    }
    text(
        &mut s,
        left,
        h - 12.0,
        "start",
        "bars: simulated % of ideal; dashed: best split over the hashed QP paths (upper value)",
    );
    s.push_str("</svg>\n");
    s
}

/// (b) Per rail: how many leaf uplinks carry i QP paths (bars) against the expectation under a
/// uniform hash, sum over leaves of M x Binomial(K_leaf, 1/M)(i) (dots).
pub fn collisions(r: &SimResult) -> String {
    let (pw, ph, cols) = (260.0, 150.0, 4usize);
    let n = r.per_rail.len().max(1);
    let rows = n.div_ceil(cols);
    let w = 20.0 + cols.min(n) as f64 * (pw + 20.0);
    let h = 50.0 + rows as f64 * (ph + 50.0);
    let mut s = open(w.max(width_for(subtitle(r).len(), 420.0)), h);
    text(
        &mut s,
        20.0,
        16.0,
        "start",
        &format!(
            "uplink collisions per rail, {} q={}: uplinks with i QP paths (bars) vs Binomial(n, 1/{}) (dots)",
            r.policy, r.qps, r.spines
        ),
    );
    text(&mut s, 20.0, 30.0, "start", &subtitle(r));
    for (k, rail) in r.per_rail.iter().enumerate() {
        let ox = 20.0 + (k % cols) as f64 * (pw + 20.0);
        let oy = 50.0 + (k / cols) as f64 * (ph + 50.0);
        let bins = rail
            .uplink_hist
            .len()
            .max(rail.uplink_hist_expected.len())
            .max(1);
        let top = rail
            .uplink_hist
            .iter()
            .map(|&c| c as f64)
            .chain(rail.uplink_hist_expected.iter().copied())
            .fold(1.0, f64::max);
        let bw = pw / bins as f64;
        let base = oy + ph;
        let _ = writeln!(
            s,
            "<g class=\"rail\" data-rail=\"{}\"><rect x=\"{ox:.1}\" y=\"{oy:.1}\" width=\"{pw:.1}\" height=\"{ph:.1}\" fill=\"none\" stroke=\"#cccccc\"/>",
            rail.rail
        );
        for (i, &c) in rail.uplink_hist.iter().enumerate() {
            let bh = c as f64 / top * ph;
            let _ = writeln!(
                s,
                "<rect class=\"obs\" data-paths=\"{i}\" data-count=\"{c}\" x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{bh:.2}\" fill=\"#4e79a7\"><title>{c} uplinks with {i} paths</title></rect>",
                ox + i as f64 * bw + 1.0,
                base - bh,
                (bw - 2.0).max(0.5)
            );
        }
        for (i, &e) in rail.uplink_hist_expected.iter().enumerate() {
            let y = base - fin(e) / top * ph;
            let _ = writeln!(
                s,
                "<circle class=\"exp\" data-paths=\"{i}\" data-expected=\"{}\" cx=\"{:.2}\" cy=\"{y:.2}\" r=\"2.5\" fill=\"#e15759\"><title>expected {e:.2}</title></circle>",
                fin(e),
                ox + (i as f64 + 0.5) * bw
            );
        }
        let step = (bins / 8).max(1);
        for i in (0..bins).step_by(step) {
            text(
                &mut s,
                ox + (i as f64 + 0.5) * bw,
                base + 12.0,
                "middle",
                &format!("{i}"),
            );
        }
        text(
            &mut s,
            ox,
            base + 26.0,
            "start",
            &format!(
                "{}: max {} paths/uplink, fullest {:.0}%",
                if r.is_plane() {
                    "all rails (one plane)".to_string()
                } else {
                    format!("rail {}", rail.rail)
                },
                rail.uplink_hist.len().saturating_sub(1),
                100.0 * rail.max_uplink_util
            ),
        );
        s.push_str("</g>\n");
    }
    s.push_str("</svg>\n");
    s
}

/// Colour of a utilisation in 0..=1: white to dark red through yellow and orange.
pub(crate) fn util_colour(u: f64) -> String {
    const STOPS: [(f64, [f64; 3]); 4] = [
        (0.0, [255.0, 255.0, 255.0]),
        (0.5, [253.0, 204.0, 92.0]),
        (0.8, [240.0, 100.0, 40.0]),
        (1.0, [150.0, 0.0, 20.0]),
    ];
    let u = fin(u).clamp(0.0, 1.0);
    let mut c = STOPS[3].1;
    for w in STOPS.windows(2) {
        let ((a, ca), (b, cb)) = (w[0], w[1]);
        if u <= b {
            let t = (u - a) / (b - a);
            c = [0, 1, 2].map(|i| ca[i] + t * (cb[i] - ca[i]));
            break;
        }
    }
    format!(
        "#{:02x}{:02x}{:02x}",
        c[0].round() as u8,
        c[1].round() as u8,
        c[2].round() as u8
    )
}

/// (c) Per rail, one cell per leaf->spine uplink (rows: leaves, columns: spines), coloured by
/// its busy fraction over the simulated time; failed links are grey.
pub fn heatmap(r: &SimResult) -> String {
    let (leaves, spines) = (r.leaves.max(1), r.spines.max(1));
    let cell = (240.0 / leaves.max(spines) as f64).clamp(2.0, 16.0);
    let (pw, ph) = (spines as f64 * cell, leaves as f64 * cell);
    let panels = r.uplink_rails();
    let cols = panels.len().clamp(1, 4);
    let rows = panels.len().max(1).div_ceil(cols);
    let w = 20.0 + cols as f64 * (pw.max(150.0) + 30.0);
    let h = 80.0 + rows as f64 * (ph + 50.0);
    let mut s = open(w.max(width_for(subtitle(r).len(), 420.0)), h);
    text(
        &mut s,
        20.0,
        16.0,
        "start",
        &format!(
            "uplink utilisation per rail, {} q={} (rows: {} leaves, columns: {} spines)",
            r.policy, r.qps, leaves, spines
        ),
    );
    text(&mut s, 20.0, 30.0, "start", &subtitle(r));
    // Legend.
    for i in 0..=10 {
        let u = f64::from(i) / 10.0;
        let _ = writeln!(
            s,
            "<rect x=\"{:.1}\" y=\"38\" width=\"14\" height=\"10\" fill=\"{}\" stroke=\"#cccccc\" stroke-width=\"0.5\"/>",
            20.0 + f64::from(i) * 14.0,
            util_colour(u)
        );
    }
    text(&mut s, 20.0, 60.0, "start", "0%");
    text(&mut s, 20.0 + 11.0 * 14.0, 60.0, "end", "100%");
    text(&mut s, 190.0, 47.0, "start", "grey: failed link");
    for (k, p) in panels.iter().enumerate() {
        let (rail, util, failed, max, mean) = (p.rail, p.util, &p.failed, p.max, p.mean);
        let ox = 20.0 + (k % cols) as f64 * (pw.max(150.0) + 30.0);
        let oy = 80.0 + (k / cols) as f64 * (ph + 50.0);
        let _ = writeln!(s, "<g class=\"rail\" data-rail=\"{rail}\">");
        for (i, &u) in util.iter().enumerate() {
            let (leaf, spine) = (i / spines, i % spines);
            let failed = failed.contains(&(i as u32));
            let fill = if failed {
                "#9e9e9e".to_string()
            } else {
                util_colour(u)
            };
            let _ = writeln!(
                s,
                "<rect class=\"cell\" data-leaf=\"{leaf}\" data-spine=\"{spine}\" data-util=\"{}\" x=\"{:.2}\" y=\"{:.2}\" width=\"{cell:.2}\" height=\"{cell:.2}\" fill=\"{fill}\"><title>leaf {leaf} spine {spine}: {}</title></rect>",
                fin(u),
                ox + spine as f64 * cell,
                oy + leaf as f64 * cell,
                if failed {
                    "failed".to_string()
                } else {
                    format!("{:.1}%", 100.0 * u)
                }
            );
        }
        text(
            &mut s,
            ox,
            oy + ph + 14.0,
            "start",
            &format!(
                "rail {}: fullest {:.0}%, mean {:.0}%",
                rail,
                100.0 * max,
                100.0 * mean
            ),
        );
        s.push_str("</g>\n");
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_and_escapes() {
        assert_eq!(util_colour(0.0), "#ffffff");
        assert_eq!(util_colour(1.0), "#960014");
        assert_eq!(util_colour(f64::NAN), "#ffffff");
        // Halfway between the 0.5 and 0.8 stops' second channel: 204 + 0.5 (100 - 204) = 152.
        assert_eq!(&util_colour(0.65)[3..5], "98");
        assert_eq!(esc("a<b&\"c\""), "a&lt;b&amp;&quot;c&quot;");
    }
}
