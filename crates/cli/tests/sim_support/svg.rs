//! A minimal reader of the charts `dqplb sim --svg` and `dqplb sim sweep --svg` write (plotters'
//! SVG markup): checks they are well-formed with finite numbers; elements in document order.

use std::collections::HashMap;
use std::path::Path;

/// One element: its name, attributes and (for `<text>`) its text, trimmed.
pub(crate) struct Elem {
    pub name: String,
    pub attrs: HashMap<String, String>,
    pub text: String,
}

impl Elem {
    pub(crate) fn attr(&self, k: &str) -> &str {
        self.attrs
            .get(k)
            .unwrap_or_else(|| panic!("<{}> has no {k}", self.name))
    }

    pub(crate) fn num(&self, k: &str) -> f64 {
        self.attr(k).parse().unwrap()
    }

    /// A shape painted inside (`fill` not "none").
    pub(crate) fn is_filled(&self) -> bool {
        self.attrs.get("fill").is_some_and(|f| f != "none")
    }

    /// An outline (`fill="none"`) in `stroke`.
    pub(crate) fn is_outline(&self, stroke: &str) -> bool {
        self.attrs.get("fill").map(String::as_str) == Some("none")
            && self.attrs.get("stroke").map(String::as_str) == Some(stroke)
    }

    /// A polyline's points.
    pub(crate) fn points(&self) -> Vec<(f64, f64)> {
        self.attr("points")
            .split_whitespace()
            .map(|p| {
                let (x, y) = p.split_once(',').expect("x,y");
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect()
    }

    /// The number at the end of a text, after `prefix` and before an optional `suffix`.
    pub(crate) fn number_after(&self, prefix: &str, suffix: &str) -> f64 {
        let t = self.text.strip_prefix(prefix).unwrap_or_else(|| {
            panic!("{:?} does not start with {prefix:?}", self.text);
        });
        let t = t.strip_suffix(suffix).unwrap_or(t);
        t.parse()
            .unwrap_or_else(|_| panic!("{:?}: no number after {prefix:?}", self.text))
    }
}

const NUMERIC: [&str; 14] = [
    "x",
    "y",
    "width",
    "height",
    "cx",
    "cy",
    "r",
    "x1",
    "y1",
    "x2",
    "y2",
    "opacity",
    "stroke-width",
    "font-size",
];

/// Reads `s`: tags balance, one `<svg>` root, attributes are quoted, text holds no raw '<' or '>'
/// and only the five XML entities, numeric attributes and polyline points are finite. Returns the
/// elements in document order.
pub(crate) fn parse_svg(s: &str) -> Vec<Elem> {
    let mut out: Vec<Elem> = Vec::new();
    // Open elements: name and index in `out`.
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut roots = 0;
    let mut rest = s;
    while let Some(i) = rest.find('<') {
        let text = &rest[..i];
        check_text(text);
        if let Some((_, k)) = stack.last() {
            if out[*k].name == "text" {
                out[*k].text.push_str(text.trim());
            }
        }
        let Some(j) = rest[i..].find('>') else {
            panic!("unclosed tag at {:?}", &rest[i..(i + 40).min(rest.len())])
        };
        let tag = &rest[i + 1..i + j];
        rest = &rest[i + j + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                stack.pop().map(|(n, _)| n).as_deref(),
                Some(name.trim()),
                "mismatched </{name}>"
            );
            continue;
        }
        let self_closing = tag.ends_with('/');
        let body = tag.trim_end_matches('/');
        let (name, attrs) = match body.find(char::is_whitespace) {
            Some(k) => (&body[..k], &body[k..]),
            None => (body, ""),
        };
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()),
            "bad tag name {name:?}"
        );
        if stack.is_empty() {
            roots += 1;
            assert_eq!(name, "svg", "the root is not <svg>");
        }
        let attrs = parse_attrs(attrs);
        for k in NUMERIC {
            if let Some(v) = attrs.get(k) {
                let x: f64 = v
                    .parse()
                    .unwrap_or_else(|_| panic!("{k}={v:?} is not a number"));
                assert!(x.is_finite(), "{k}={v} is not finite");
            }
        }
        if let Some(p) = attrs.get("points") {
            for xy in p.split_whitespace() {
                let (x, y) = xy.split_once(',').expect("points are x,y");
                for v in [x, y] {
                    let n: f64 = v.parse().unwrap_or_else(|_| panic!("point {xy:?}"));
                    assert!(n.is_finite(), "point {xy}");
                }
            }
        }
        if !self_closing {
            stack.push((name.to_string(), out.len()));
        }
        out.push(Elem {
            name: name.to_string(),
            attrs,
            text: String::new(),
        });
    }
    check_text(rest);
    assert!(stack.is_empty(), "unclosed elements");
    assert!(rest.trim().is_empty(), "text after the root");
    assert_eq!(roots, 1, "one root element");
    out
}

/// [`parse_svg`] of the file at `p`.
pub(crate) fn read(p: &Path) -> Vec<Elem> {
    let s = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    parse_svg(&s)
}

fn check_text(t: &str) {
    let mut r = t;
    while let Some(i) = r.find('&') {
        let tail = &r[i..];
        assert!(
            ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                .iter()
                .any(|e| tail.starts_with(e)),
            "bare & in {t:?}"
        );
        r = &tail[1..];
    }
    assert!(!t.contains('>'), "raw > in text {t:?}");
}

fn parse_attrs(s: &str) -> HashMap<String, String> {
    let mut m = HashMap::new();
    let mut r = s.trim();
    while !r.is_empty() {
        let eq = r
            .find('=')
            .unwrap_or_else(|| panic!("attribute without value: {r:?}"));
        let key = r[..eq].trim().to_string();
        let after = &r[eq + 1..];
        assert!(after.starts_with('"'), "unquoted attribute {key}");
        let end = after[1..].find('"').expect("unterminated attribute") + 1;
        let val = after[1..end].to_string();
        check_text(&val);
        assert!(
            m.insert(key.clone(), val).is_none(),
            "duplicate attribute {key}"
        );
        r = after[end + 1..].trim_start();
    }
    m
}

/// The filled rectangles after the background (the first element drawn, white, the whole
/// picture), in document order.
pub(crate) fn filled_rects(els: &[Elem]) -> Vec<&Elem> {
    let root = &els[0];
    let bg = &els[1];
    assert_eq!((bg.name.as_str(), bg.attr("fill")), ("rect", "#FFFFFF"));
    assert_eq!(
        (bg.attr("width"), bg.attr("height")),
        (root.attr("width"), root.attr("height"))
    );
    els[2..]
        .iter()
        .filter(|e| e.name == "rect" && e.is_filled())
        .collect()
}

/// The text elements whose text is `t`.
pub(crate) fn texts<'a>(els: &'a [Elem], t: &str) -> Vec<&'a Elem> {
    els.iter()
        .filter(|e| e.name == "text" && e.text == t)
        .collect()
}

/// Grey: a failed link, a sweep point with faults.
pub(crate) const GREY: &str = "#9E9E9E";

/// Plotters' colour notation.
fn hex(c: [f64; 3]) -> String {
    let [r, g, b] = c.map(|v| v.round() as u8);
    format!("#{r:02X}{g:02X}{b:02X}")
}

/// The heatmap's colour of a utilisation: white, yellow (0.5), orange (0.8), dark red (1).
pub(crate) fn util_colour(u: f64) -> String {
    let stops: [(f64, [f64; 3]); 4] = [
        (0.0, [255.0, 255.0, 255.0]),
        (0.5, [253.0, 204.0, 92.0]),
        (0.8, [240.0, 100.0, 40.0]),
        (1.0, [150.0, 0.0, 20.0]),
    ];
    let u = u.clamp(0.0, 1.0);
    let k = (1..4).find(|&k| u <= stops[k].0).unwrap_or(3);
    let ((a, ca), (b, cb)) = (stops[k - 1], stops[k]);
    let t = (u - a) / (b - a);
    hex([0, 1, 2].map(|i| ca[i] + t * (cb[i] - ca[i])))
}

/// The sweep's colour of a fraction of ideal: white to dark green.
pub(crate) fn score_colour(x: f64) -> String {
    let x = x.clamp(0.0, 1.0);
    let (from, to) = ([255.0, 255.0, 255.0], [20.0, 110.0, 50.0]);
    hex([0, 1, 2].map(|i| from[i] + x * (to[i] - from[i])))
}
