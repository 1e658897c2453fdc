//! The retry amplification of the Google SRE book (chapters 21 and 22),
//! reproduced through backstop's real stack.
//!
//! `cargo run --example amplification`
//!
//! A backend that fails every request (it answers 503 to every GET) gets 500
//! calls a second for 20 s of tokio's paused clock, through a `Backstop` stack of
//! 3 attempts per call, first without a retry budget, then with a budget of 10 %
//! of first attempts (and no floor). The book: without a budget the backend sees
//! "just below 3×" its load, with a 10 % budget "1.1×". The model is in
//! `examples/common/amplification.rs` (shared with `tests/overload`), where its
//! choices are written down. It prints, for each budget, the requests the backend
//! saw per call offered:
//!
//! ```text
//! amplification budget=<off|10pct> load=<x>
//! ```

#[path = "common/amplification.rs"]
mod amplification;

use amplification::{offer, Budget};
use backstop::BoxError;

fn main() -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    for budget in Budget::ALL {
        let load = runtime.block_on(offer(budget))?;
        println!(
            "amplification budget={} load={:.2}",
            budget.name(),
            load.ratio()
        );
    }
    Ok(())
}
