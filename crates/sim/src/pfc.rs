//! P mode's priority flow control: per ingress link the bytes not yet forwarded, a pause to the
//! link's sender at Xoff and a resume at Xon (XOFF/XON, one traffic class).

use super::error::SimError;

/// Priority flow control: a switch pauses the link feeding one of its ingress ports when the
/// bytes that came in through it and are not yet forwarded pass `xoff`, resumes it at `xon`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfcSpec {
    pub enabled: bool,
    pub xoff: u64,
    pub xon: u64,
}

impl Default for PfcSpec {
    /// Off; when on, 1000 kB / 500 kB: chosen, not a vendor default (docs/records/simulation.md).
    fn default() -> Self {
        PfcSpec {
            enabled: false,
            xoff: 1_000_000,
            xon: 500_000,
        }
    }
}

impl PfcSpec {
    pub fn validate(&self) -> Result<(), SimError> {
        if self.enabled && (self.xon > self.xoff || self.xoff == 0) {
            return Err(SimError::Config(format!(
                "PFC Xon {} B must be at most Xoff {} B, and Xoff above 0",
                self.xon, self.xoff
            )));
        }
        Ok(())
    }
}

/// PFC state per link (as the sender of an ingress port).
pub(crate) struct Pfc {
    pub spec: PfcSpec,
    /// Bytes this link sent that the next switch has not forwarded yet.
    pub ingress: Vec<u64>,
    pub max_ingress: u64,
    /// The downstream switch has sent a pause not yet followed by a resume.
    pub sent: Vec<bool>,
    /// The pause reached this link's sender: it sends nothing.
    pub paused: Vec<bool>,
    /// A paused switch egress whose head the core holds.
    pub held: Vec<bool>,
    /// Pauses received.
    pub pauses: Vec<u64>,
}

impl Pfc {
    pub(crate) fn new(spec: PfcSpec, links: usize) -> Pfc {
        let n = if spec.enabled { links } else { 0 };
        Pfc {
            spec,
            ingress: vec![0; n],
            max_ingress: 0,
            sent: vec![false; n],
            paused: vec![false; n],
            held: vec![false; n],
            pauses: vec![0; n],
        }
    }

    /// Link `l` sent `len` more bytes into a switch; true when a pause must go back to it.
    #[inline]
    pub(crate) fn add(&mut self, l: u32, len: u32) -> bool {
        if !self.spec.enabled {
            return false;
        }
        let i = &mut self.ingress[l as usize];
        *i += u64::from(len);
        self.max_ingress = self.max_ingress.max(*i);
        if *i >= self.spec.xoff && !self.sent[l as usize] {
            self.sent[l as usize] = true;
            return true;
        }
        false
    }

    /// The switch forwarded `len` bytes that came in through `l`; true when a resume must go.
    #[inline]
    pub(crate) fn forwarded(&mut self, l: u32, len: u32) -> bool {
        if !self.spec.enabled {
            return false;
        }
        let i = &mut self.ingress[l as usize];
        *i -= u64::from(len);
        if *i <= self.spec.xon && self.sent[l as usize] {
            self.sent[l as usize] = false;
            return true;
        }
        false
    }

    #[inline]
    pub(crate) fn is_paused(&self, l: u32) -> bool {
        self.spec.enabled && self.paused[l as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_at_xoff_resume_at_xon_once_each() {
        let spec = PfcSpec {
            enabled: true,
            xoff: 300,
            xon: 100,
        };
        let mut p = Pfc::new(spec, 2);
        assert!(!p.add(1, 200));
        assert!(p.add(1, 100), "300 reaches Xoff: pause");
        assert!(!p.add(1, 100), "one pause until the resume");
        assert!(!p.forwarded(1, 200), "200 still above Xon");
        assert!(p.forwarded(1, 100), "100 reaches Xon: resume");
        assert!(!p.forwarded(1, 100));
        assert_eq!((p.ingress[1], p.max_ingress, p.ingress[0]), (0, 400, 0));
        let mut off = Pfc::new(PfcSpec::default(), 2);
        assert!(!off.add(0, 1 << 30) && !off.is_paused(0));
    }
}
