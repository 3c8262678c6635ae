//! The penalty box's token bucket, shared by every flow SFB judges
//! unresponsive. It keeps fractional credit, unlike the kernel's (see the
//! module docs, "Where this goes beyond the kernel").

use crate::clock::Timestamp;

/// Penalty-bucket credit units per token.
const TOKEN: u64 = 1_000_000_000;

/// The penalty box's token bucket with exact fractional credit.
#[derive(Debug, Clone)]
pub(super) struct PenaltyBucket {
    rate: u64,
    cap: u64,
    /// Credit in units of 10^-9 token.
    credit: u64,
    pub(super) at: Option<Timestamp>,
}

impl PenaltyBucket {
    pub(super) fn new(rate: u32, burst: u32) -> Self {
        let cap = u64::from(burst) * TOKEN;
        PenaltyBucket {
            rate: u64::from(rate),
            cap,
            credit: cap,
            at: None,
        }
    }

    pub(super) fn admit(&mut self, now: Timestamp) -> bool {
        if self.rate == 0 || self.cap == 0 {
            return false;
        }
        let at = *self.at.get_or_insert(now);
        if now > at {
            let gained = now.nanos_since(at).saturating_mul(self.rate);
            self.credit = self.credit.saturating_add(gained).min(self.cap);
            self.at = Some(now);
        }
        if self.credit >= TOKEN {
            self.credit -= TOKEN;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::sfb::algorithm::NS_PER_MS;

    #[test]
    fn penalty_bucket_keeps_fractions() {
        let mut b = PenaltyBucket::new(10, 1);
        let mut admitted = 0;
        // One arrival per ms for 1 s: the initial token plus 10 per second.
        for ms in 0..1000u64 {
            admitted += u32::from(b.admit(Timestamp::from_nanos(ms * NS_PER_MS)));
        }
        assert_eq!(admitted, 1 + 9);
    }
}
