//! An observer that writes each event down as one line of text (shared by the
//! test binaries that observe, each using part of it).

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use backstop::observe::{outcome_label, reason_label, Event, Observer};

#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<String>>>);

impl Recorder {
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Writes down a line of the test's own.
    pub fn push(&self, line: String) {
        self.0.lock().unwrap().push(line);
    }

    /// The lines whose event name is `name`.
    pub fn named(&self, name: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.split(' ').next() == Some(name))
            .collect()
    }
}

impl Observer for Recorder {
    fn on_event(&self, event: &Event<'_>) {
        let call = event.call();
        let mut line = match event {
            Event::CallFinished(e) => format!(
                "call_finished outcome={} attempts={} stop={}",
                outcome_label(e.outcome),
                e.attempts,
                e.stop.as_str()
            ),
            Event::AttemptFinished(e) => {
                let mut line = format!(
                    "attempt_finished attempt={} outcome={} tracked={}",
                    e.attempt,
                    outcome_label(e.outcome),
                    e.progress.is_some()
                );
                if e.copy > 0 {
                    line.push_str(&format!(" copy={}", e.copy));
                }
                line
            }
            Event::RetryScheduled(e) => format!(
                "retry_scheduled attempt={} reason={} wait_ms={}",
                e.attempt,
                reason_label(e.reason),
                e.wait.as_millis()
            ),
            Event::RetrySkipped(e) => {
                format!(
                    "retry_skipped attempt={} gate={}",
                    e.attempt,
                    e.gate.as_str()
                )
            }
            Event::CallRefused(e) => format!("call_refused refusal={}", e.refusal.as_str()),
            Event::HedgeSent(e) => format!("hedge_sent copy={}", e.copy),
            Event::HedgeWon(e) => format!("hedge_won copy={}", e.copy),
            Event::LoserCancelled(e) => format!("loser_cancelled copy={}", e.copy),
            Event::BreakerStateChanged(e) => {
                format!("breaker_state_changed from={} to={}", e.from, e.to)
            }
            Event::BudgetRanDry(_) => "budget_ran_dry".to_owned(),
            Event::OriginPaused(e) => format!("origin_paused pause_ms={}", e.pause.as_millis()),
            Event::OriginPauseExtended(e) => {
                format!("origin_pause_extended by_ms={}", e.by.as_millis())
            }
            Event::OriginResumed(_) => "origin_resumed".to_owned(),
            Event::CallWaited(e) => format!("call_waited wait_ms={}", e.wait.as_millis()),
            _ => "unknown".to_owned(),
        };
        line.push_str(&format!(
            " origin={} method={}",
            call.origin(),
            call.method()
        ));
        if let Some(route) = call.route() {
            line.push_str(&format!(" route={route}"));
        }
        self.0.lock().unwrap().push(line);
    }
}
