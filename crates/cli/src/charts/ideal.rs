//! `ideal.svg`: % of ideal per run (policy, q) as bars, and the best split over the run's hashed
//! QP paths (100 / bound_upper) as a dashed tick over each bar but spray's.

// Drawing order, which tests/sim_svg.rs reads: the axes, then per run its bar (the only filled
// rectangles after the background), its value over it, its dashed tick (black polylines), its
// "q=Q" and policy labels under the axis.

use std::iter::once;

use dqplb_sim::{SimPolicy, SimResult};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::sim_subtitle;
use super::style::{fin, header, render, sim_policy_colour, text_style, width_for};
use super::style::{LABEL_SIZE, TEXT_SIZE};

/// Top of the y axis, % of ideal: room for the value over a full bar.
const Y_TOP: f64 = 110.0;

/// The bar chart of `rows`, in their order.
pub(crate) fn ideal_bars(rows: &[&SimResult]) -> Result<String, String> {
    let sub = rows.first().map(|r| sim_subtitle(r)).unwrap_or_default();
    let n = rows.len().max(1);
    let w = width_for(sub.len(), (120 + 74 * n) as u32).max(620);
    render("ideal", (w, 470), |root| {
        let body = header(root, &["% of ideal per policy and q".to_string(), sub])?;
        let (plot, foot) = body.split_vertically(body.dim_in_pixel().1 as i32 - 26);
        foot.draw(&Text::new(
            "bars: simulated % of ideal; dashed: best split over the hashed QP paths (upper value)",
            (16, 6),
            text_style(TEXT_SIZE, BLACK, HPos::Left, VPos::Top),
        ))?;
        let mut chart = ChartBuilder::on(&plot)
            .margin_left(10)
            .margin_right(20)
            .margin_top(4)
            .x_label_area_size(40)
            .y_label_area_size(48)
            .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..Y_TOP)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_labels(12)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .y_desc("% of ideal")
            .bold_line_style(RGBColor(0xdd, 0xdd, 0xdd))
            .light_line_style(TRANSPARENT)
            .draw()?;
        for (i, r) in rows.iter().enumerate() {
            let x = i as f64;
            let pct = fin(r.pct_of_ideal);
            chart.draw_series(once(Rectangle::new(
                [(x - 0.38, 0.0), (x + 0.38, pct)],
                sim_policy_colour(r.policy).filled(),
            )))?;
            chart.draw_series(once(
                EmptyElement::at((x, pct))
                    + Text::new(
                        format!("{pct:.1}"),
                        (0, -3),
                        text_style(LABEL_SIZE, BLACK, HPos::Center, VPos::Bottom),
                    ),
            ))?;
            if r.bound_upper > 0.0 && r.policy != SimPolicy::Spray {
                let b = (100.0 / r.bound_upper).min(100.0);
                chart.draw_series(once(DashedPathElement::new(
                    vec![(x - 0.45, b), (x + 0.45, b)],
                    4,
                    3,
                    BLACK.stroke_width(1),
                )))?;
            }
            let label = r.policy.name().replace("round-robin-message", "rr-msg");
            let under = text_style(TEXT_SIZE, BLACK, HPos::Center, VPos::Top);
            chart.draw_series(once(
                EmptyElement::at((x, 0.0))
                    + Text::new(format!("q={}", r.qps), (0, 6), under.clone())
                    + Text::new(label, (0, 21), under),
            ))?;
        }
        Ok(())
    })
}
