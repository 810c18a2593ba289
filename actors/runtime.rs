//! Where the actors run when the caller is not inside an actix system.
//!
//! Inside an actix system (`#[actix_rt::main]`, `#[actix_rt::test]`, an actix-web server)
//! actors start on the caller's arbiter, as actix users expect. Anywhere else — a plain
//! multi-threaded tokio runtime, or a synchronous `main` driving a future with
//! `futures::executor::block_on` — they start on one background actix system owned by this
//! crate ("rocketmq-actor" thread), and the handles talk to them through channels, which work
//! from any executor.

use std::future::Future;
use std::sync::OnceLock;

use actix::prelude::*;

use crate::error::{Error, Result};

/// The background system's arbiter, started on first use.
fn background() -> Result<&'static actix_rt::ArbiterHandle> {
    static ARBITER: OnceLock<Option<actix_rt::ArbiterHandle>> = OnceLock::new();
    ARBITER
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("rocketmq-actor".into())
                .spawn(move || {
                    let system = actix_rt::System::new();
                    let _ = tx.send(actix_rt::Arbiter::current());
                    // Runs until the process ends: clients may be created at any time.
                    let _ = system.run();
                });
            spawned.ok().and_then(|_| rx.recv().ok())
        })
        .as_ref()
        .ok_or_else(|| Error::Shutdown("cannot start the rocketmq-actor runtime thread".into()))
}

/// Whether the calling thread belongs to an actix system (so actors can start right here).
pub(crate) fn in_actix_system() -> bool {
    actix_rt::System::try_current().is_some()
}

/// Starts `actor` under a supervisor (restarted in place when it stops while its address is
/// held): on the caller's arbiter inside an actix system, else on the background one.
pub(crate) fn start_supervised<A>(actor: A) -> Result<Addr<A>>
where
    A: Supervised + Actor<Context = Context<A>> + Send,
{
    if in_actix_system() {
        Ok(Supervisor::start(move |_| actor))
    } else {
        Ok(Supervisor::start_in_arbiter(background()?, move |_| actor))
    }
}

/// Runs the future `make` builds on an actix arbiter and returns its output: right here inside
/// an actix system, else on the background system (`make` is called there, so the future it
/// returns may hold `Rc`s and start actors). The future returned works on any executor.
pub(crate) async fn run_on_actix<F, Fut, T>(make: F) -> Result<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
    T: Send + 'static,
{
    if in_actix_system() {
        return Ok(make().await);
    }
    let (tx, rx) = futures::channel::oneshot::channel();
    let spawned = background()?.spawn_fn(move || {
        actix_rt::spawn(async move {
            let _ = tx.send(make().await);
        });
    });
    if !spawned {
        return Err(Error::Shutdown(
            "the rocketmq-actor runtime thread stopped".into(),
        ));
    }
    rx.await
        .map_err(|_| Error::Shutdown("the rocketmq-actor runtime thread stopped".into()))
}
