//! What every chart shares: the font, colours and colour ramps, header lines over a plot, the
//! legend box, and rendering a plotters drawing (svg_backend) into an SVG document.

use dqplb_engine::PolicyKind;
use dqplb_sim::SimPolicy;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub(crate) const FONT: &str = "sans-serif";

/// Font size (plotters' units: the SVG's font-size is this / 1.24) of a header's first line
/// and of the lines under it, and of labels inside a plot.
pub(crate) const TITLE_SIZE: f64 = 16.0;
pub(crate) const TEXT_SIZE: f64 = 13.0;
pub(crate) const LABEL_SIZE: f64 = 12.0;

/// About how wide a character of [`TEXT_SIZE`] text is, in pixels (to size a chart to its
/// subtitle).
pub(crate) const CHAR_PX: f64 = 6.0;

/// Failed links, runs with faults: grey.
pub(crate) const GREY: RGBColor = RGBColor(0x9e, 0x9e, 0x9e);

/// Line colours, one per series of a panel, in a fixed order.
pub(crate) const LINE_COLOURS: [RGBColor; 8] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0x9c, 0x6a, 0xde),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
];

/// A drawing area of the SVG backend, in pixels.
pub(crate) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// What drawing on the SVG backend returns.
pub(crate) type Drawn<T = ()> = Result<T, DrawingAreaErrorKind<std::io::Error>>;

/// Turns a plotters error into the command's message, naming the chart.
pub(crate) fn err<E: std::fmt::Debug>(what: &str) -> impl Fn(E) -> String + '_ {
    move |e| format!("plot {what}: {e:?}")
}

/// Draws with `draw` on a white `w` x `h` SVG and returns the document. The same input gives
/// the same bytes: plotters writes elements in drawing order and, without a font backend,
/// estimates text sizes from the string alone.
pub(crate) fn render(
    what: &str,
    (w, h): (u32, u32),
    draw: impl FnOnce(&Area<'_>) -> Drawn,
) -> Result<String, String> {
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err(what))?;
        draw(&root).map_err(err(what))?;
        root.present().map_err(err(what))?;
    }
    Ok(buf)
}

/// A text style of `size` in `colour`, anchored at `h` and `v`.
pub(crate) fn text_style(size: f64, colour: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    (FONT, size).into_font().color(&colour).pos(Pos::new(h, v))
}

/// Height in pixels of a [`header`] of `lines` lines.
pub(crate) fn header_height(lines: usize) -> i32 {
    let first = if lines > 0 { TITLE_SIZE as i32 + 3 } else { 0 };
    8 + first + lines.saturating_sub(1) as i32 * (TEXT_SIZE as i32 + 3) + 6
}

/// Writes `lines` at the top left of `area`, the first as a title, and returns the area under
/// them ([`header_height`] pixels down).
pub(crate) fn header<'a>(area: &Area<'a>, lines: &[String]) -> Drawn<Area<'a>> {
    let mut y = 8;
    for (i, line) in lines.iter().enumerate() {
        let size = if i == 0 { TITLE_SIZE } else { TEXT_SIZE };
        let style = text_style(size, BLACK, HPos::Left, VPos::Top);
        area.draw(&Text::new(line.as_str(), (16, y), style))?;
        y += size as i32 + 3;
    }
    Ok(area.split_vertically(header_height(lines.len())).1)
}

/// Width for a chart whose widest header line has `chars` characters, at least `at_least`.
pub(crate) fn width_for(chars: usize, at_least: u32) -> u32 {
    ((40.0 + CHAR_PX * chars as f64) as u32).max(at_least)
}

/// The legend of a colour ramp at (x, y): 11 swatches, 14 x 10 px, for 0, 0.1, .. 1 of
/// `colour`, a light outline, "0%" and "100%" under its ends and `note` to its right. The
/// swatches are the first filled rectangles a chart draws after its background.
pub(crate) fn ramp_legend(
    area: &Area<'_>,
    (x, y): (i32, i32),
    colour: fn(f64) -> RGBColor,
    note: &str,
) -> Drawn {
    for i in 0..=10 {
        let x0 = x + 14 * i;
        area.draw(&Rectangle::new(
            [(x0, y), (x0 + 14, y + 10)],
            colour(f64::from(i) / 10.0).filled(),
        ))?;
    }
    area.draw(&Rectangle::new(
        [(x, y), (x + 154, y + 10)],
        RGBColor(0xcc, 0xcc, 0xcc).stroke_width(1),
    ))?;
    let label = |h| text_style(LABEL_SIZE, BLACK, h, VPos::Top);
    area.draw(&Text::new("0%", (x, y + 13), label(HPos::Left)))?;
    area.draw(&Text::new("100%", (x + 154, y + 13), label(HPos::Right)))?;
    let note_style = text_style(TEXT_SIZE, BLACK, HPos::Left, VPos::Center);
    area.draw(&Text::new(note, (x + 170, y + 5), note_style))
}

/// The series legend of `chart`: a white box with a black border at `pos`.
pub(crate) fn legend<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    pos: SeriesLabelPosition,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(pos)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
}

/// A finite number (0 for NaN or infinities, which a chart cannot place).
pub(crate) fn fin(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
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

/// The simulator's policies, each its own colour.
pub(crate) fn sim_policy_colour(p: SimPolicy) -> RGBColor {
    match p {
        SimPolicy::Engine(PolicyKind::SingleQp) => GREY,
        SimPolicy::Engine(PolicyKind::StaticSplit) => RGBColor(0x4e, 0x79, 0xa7),
        SimPolicy::Engine(PolicyKind::RoundRobinMessage) => RGBColor(0x76, 0xb7, 0xb2),
        SimPolicy::Engine(PolicyKind::Dqplb) => RGBColor(0xe1, 0x57, 0x59),
        SimPolicy::DqplbRehash => RGBColor(0xf2, 0x8e, 0x2b),
        SimPolicy::Engine(PolicyKind::DqplbLed) => RGBColor(0x9c, 0x6a, 0xde),
        SimPolicy::DqplbLedRehash => RGBColor(0xff, 0x9d, 0xa7),
        SimPolicy::Spray => RGBColor(0x59, 0xa1, 0x4f),
        SimPolicy::LpSplit => RGBColor(0xed, 0xc9, 0x48),
        SimPolicy::Nccl { .. } => RGBColor(0x3b, 0x3b, 0x3b),
    }
}

/// Linear blend of `from` and `to` at `t` in 0..=1, each channel rounded.
fn blend(from: [f64; 3], to: [f64; 3], t: f64) -> RGBColor {
    let c = [0, 1, 2].map(|i| (from[i] + t * (to[i] - from[i])).round() as u8);
    RGBColor(c[0], c[1], c[2])
}

/// Colour of a utilisation in 0..=1: white to dark red through yellow and orange.
pub(crate) fn util_colour(u: f64) -> RGBColor {
    const STOPS: [(f64, [f64; 3]); 4] = [
        (0.0, [255.0, 255.0, 255.0]),
        (0.5, [253.0, 204.0, 92.0]),
        (0.8, [240.0, 100.0, 40.0]),
        (1.0, [150.0, 0.0, 20.0]),
    ];
    let u = fin(u).clamp(0.0, 1.0);
    for w in STOPS.windows(2) {
        let ((a, ca), (b, cb)) = (w[0], w[1]);
        if u <= b {
            return blend(ca, cb, (u - a) / (b - a));
        }
    }
    blend(STOPS[3].1, STOPS[3].1, 0.0)
}

/// Colour of a fraction of ideal in 0..=1: white to dark green.
pub(crate) fn score_colour(x: f64) -> RGBColor {
    blend(
        [255.0, 255.0, 255.0],
        [20.0, 110.0, 50.0],
        fin(x).clamp(0.0, 1.0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramps_and_units() {
        assert_eq!(util_colour(0.0), RGBColor(255, 255, 255));
        assert_eq!(util_colour(1.0), RGBColor(0x96, 0x00, 0x14));
        assert_eq!(util_colour(f64::NAN), RGBColor(255, 255, 255));
        // Halfway between the 0.5 and 0.8 stops' second channel: 204 + 0.5 (100 - 204) = 152.
        assert_eq!(util_colour(0.65).1, 152);
        assert_eq!(score_colour(0.0), RGBColor(255, 255, 255));
        assert_eq!(score_colour(1.0), RGBColor(0x14, 0x6e, 0x32));
        assert_eq!(score_colour(f64::NAN), RGBColor(255, 255, 255));
        assert_eq!(human_bytes(256 << 20), "256 MiB");
        assert_eq!(human_bytes(128 << 10), "128 KiB");
        assert_eq!(human_bytes(1000), "1000 B");
    }

    #[test]
    fn rendering_is_deterministic_and_escapes_text() {
        let draw = |a: &Area<'_>| -> Drawn {
            let below = header(a, &["a <b> & c".to_string(), "second".to_string()])?;
            ramp_legend(&below, (16, 4), util_colour, "grey: failed link")
        };
        let one = render("test", (300, 120), draw).unwrap();
        assert_eq!(one, render("test", (300, 120), draw).unwrap());
        assert!(one.starts_with("<svg width=\"300\" height=\"120\""));
        assert!(one.contains("a &lt;b&gt; &amp; c"));
        assert_eq!(one.matches("<rect").count(), 1 + 11 + 1);
        assert_eq!(one.matches("fill=\"none\"").count(), 1);
    }
}
