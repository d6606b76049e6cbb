//! Cancellation and timeouts for `fetch`: one [`AbortController`](web_sys::AbortController) per
//! request, aborted by a timer ([`Deadline`]) or by the page ([`Cancel`], when the page's
//! `AbortSignal` fires it sends `{type: "cancel", target: id}`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use gloo_timers::callback::Timeout;

use crate::error::WorkerError;

/// An `AbortController` that aborts itself after `ms` (a timeout) and that a [`Cancel`] can abort.
#[derive(Debug)]
pub struct Deadline {
    ctl: Option<web_sys::AbortController>,
    timed_out: Rc<Cell<bool>>,
    _timer: Option<Timeout>,
    ms: u64,
}

impl Deadline {
    /// A controller that aborts after `ms` (`0`: never). Without `AbortController` in the global
    /// scope, a deadline that never fires.
    pub fn new(ms: u64) -> Self {
        let ctl = web_sys::AbortController::new().ok();
        let timed_out = Rc::new(Cell::new(false));
        let timer = match (&ctl, ms) {
            (Some(c), ms) if ms > 0 => {
                let (c, t) = (c.clone(), timed_out.clone());
                Some(Timeout::new(
                    ms.min(u64::from(u32::MAX)) as u32,
                    move || {
                        t.set(true);
                        c.abort();
                    },
                ))
            }
            _ => None,
        };
        Deadline {
            ctl,
            timed_out,
            _timer: timer,
            ms,
        }
    }

    /// The signal to hand to `fetch`.
    pub fn signal(&self) -> Option<web_sys::AbortSignal> {
        self.ctl.as_ref().map(web_sys::AbortController::signal)
    }

    /// Whether the timer fired.
    pub fn timed_out(&self) -> bool {
        self.timed_out.get()
    }

    /// The timeout, ms.
    pub fn ms(&self) -> u64 {
        self.ms
    }

    /// Lets `cancel` abort this request too.
    pub fn attach(&self, cancel: Option<&Cancel>) {
        if let (Some(c), Some(ctl)) = (cancel, &self.ctl) {
            c.controllers.borrow_mut().push(ctl.clone());
        }
    }
}

/// A page request that can be cancelled: checked between steps, and aborting the `fetch`es
/// [attached](Deadline::attach) to it.
#[derive(Debug, Default)]
pub struct Cancel {
    cancelled: Cell<bool>,
    controllers: RefCell<Vec<web_sys::AbortController>>,
}

impl Cancel {
    /// Whether the page cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.get()
    }

    /// `Err(Aborted)` once the page cancelled.
    ///
    /// # Errors
    /// [`WorkerError::Aborted`] when cancelled.
    pub fn check(&self, what: &str) -> Result<(), WorkerError> {
        if self.is_cancelled() {
            Err(WorkerError::Aborted(what.to_owned()))
        } else {
            Ok(())
        }
    }

    fn fire(&self) {
        self.cancelled.set(true);
        for c in self.controllers.borrow_mut().drain(..) {
            c.abort();
        }
    }
}

thread_local! {
    static ACTIVE: RefCell<HashMap<u32, Rc<Cancel>>> = RefCell::new(HashMap::new());
}

/// Registers request `id` as cancellable until the guard drops.
pub fn register(id: u32) -> Registered {
    let c = Rc::new(Cancel::default());
    ACTIVE.with(|a| a.borrow_mut().insert(id, c.clone()));
    Registered { id, cancel: c }
}

/// Cancels request `id` if it is still running; whether it was.
pub fn cancel(id: u32) -> bool {
    let c = ACTIVE.with(|a| a.borrow_mut().remove(&id));
    c.map(|c| c.fire()).is_some()
}

/// A registered request; unregisters on drop.
#[derive(Debug)]
pub struct Registered {
    id: u32,
    cancel: Rc<Cancel>,
}

impl std::ops::Deref for Registered {
    type Target = Cancel;
    fn deref(&self) -> &Cancel {
        &self.cancel
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        ACTIVE.with(|a| {
            let mut a = a.borrow_mut();
            if a.get(&self.id).is_some_and(|c| Rc::ptr_eq(c, &self.cancel)) {
                a.remove(&self.id);
            }
        });
    }
}
