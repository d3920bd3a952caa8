//! What a client can hold of the server: how long it may take to send a request, how long a
//! kept-alive connection may sit idle, how many connections may be open, and how many bytes
//! the bodies being read may hold between them.
//!
//! Every body is unauthenticated while it is read (the signature covers the whole body), so
//! the bytes of bodies in flight are charged to one budget: past it a body is refused with
//! 503 at once rather than waiting, so bodies cannot hold the budget between them and wait
//! for each other until their deadline.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The bounds `serve` enforces on clients.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Time a connection has to send a complete request head, from when it is ready for one
    /// (accepted, or its previous response written): slow headers are cut off here.
    pub header_timeout: Duration,
    /// Time a request has to send its whole body, from when its head was read: a slow body
    /// is answered 408 and its connection closed.
    pub body_timeout: Duration,
    /// Time a kept-alive connection may stay silent after a response before it is closed.
    /// (A connection that starts sending its next request is under `header_timeout`, which
    /// also caps this.)
    pub idle_timeout: Duration,
    /// Connections open at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Bytes the bodies being read may hold between them, past the first
    /// [`FREE_BODY_BYTES`] of each.
    pub body_memory: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(15),
            body_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(10),
            max_connections: 512,
            body_memory: 100 * 1024 * 1024,
        }
    }
}

/// Bytes of each body not charged to the budget: a usual delivery (a few KiB) never meets
/// the budget, so an attack that fills it does not stop ordinary deliveries. The connection
/// cap bounds what these add up to.
pub const FREE_BODY_BYTES: usize = 64 * 1024;

/// Largest read buffer of a connection (hyper's, which holds the request head): with the
/// connection cap it bounds what slow heads can pin.
pub const MAX_READ_BUFFER: usize = 64 * 1024;

/// The bytes that bodies in flight may hold between them.
#[derive(Debug)]
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    total: usize,
}

impl BodyBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> Self {
        let total = bytes.min(Semaphore::MAX_PERMITS);
        BodyBudget {
            permits: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Bytes held now by bodies being read (past their free allowance).
    pub fn held(&self) -> usize {
        self.total.saturating_sub(self.permits.available_permits())
    }

    /// A charge for one body, empty.
    pub(super) fn charge(&self) -> Charge {
        Charge {
            permits: self.permits.clone(),
            charged: 0,
            permit: None,
        }
    }
}

/// The budget is spent: the body is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OverBudget;

/// What one body holds of the budget; given back when dropped.
#[derive(Debug)]
pub(super) struct Charge {
    permits: Arc<Semaphore>,
    /// Bytes this body is charged for, its free allowance included.
    charged: usize,
    permit: Option<OwnedSemaphorePermit>,
}

impl Charge {
    /// Make sure this body is charged for at least `bytes`; `Err` when the budget cannot
    /// cover it (nothing more is charged then).
    pub(super) fn cover(&mut self, bytes: usize) -> Result<(), OverBudget> {
        if bytes <= self.charged {
            return Ok(());
        }
        let more =
            bytes.saturating_sub(FREE_BODY_BYTES) - self.charged.saturating_sub(FREE_BODY_BYTES);
        if more > 0 {
            let n = u32::try_from(more).map_err(|_| OverBudget)?;
            let got = self
                .permits
                .clone()
                .try_acquire_many_owned(n)
                .map_err(|_| OverBudget)?;
            match &mut self.permit {
                Some(p) => p.merge(got),
                None => self.permit = Some(got),
            }
        }
        self.charged = bytes;
        Ok(())
    }

    /// Make sure this body is charged for as much of `want` bytes as the budget has free, and
    /// at least `need`: the bytes it is charged for then, or `Err` when not even `need` fits.
    pub(super) fn cover_most(&mut self, want: usize, need: usize) -> Result<usize, OverBudget> {
        let reachable = self.charged.max(FREE_BODY_BYTES) + self.permits.available_permits();
        let bytes = want.min(reachable).max(need);
        match self.cover(bytes) {
            Ok(()) => Ok(self.charged),
            // Another body took what was free in between: settle for what is needed.
            Err(OverBudget) if bytes > need => self.cover(need).map(|()| self.charged),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_past_the_free_allowance_and_gives_back_on_drop() {
        let budget = BodyBudget::new(100_000);
        let mut a = budget.charge();
        a.cover(1000).unwrap();
        assert_eq!(budget.held(), 0, "inside the free allowance");
        a.cover(FREE_BODY_BYTES + 60_000).unwrap();
        assert_eq!(budget.held(), 60_000);
        let mut b = budget.charge();
        assert_eq!(b.cover(FREE_BODY_BYTES + 50_000), Err(OverBudget));
        assert_eq!(budget.held(), 60_000, "a refused charge takes nothing");
        b.cover(FREE_BODY_BYTES + 40_000).unwrap();
        assert_eq!(budget.held(), 100_000);
        drop(a);
        assert_eq!(budget.held(), 40_000);
        drop(b);
        assert_eq!(budget.held(), 0);
    }
}
