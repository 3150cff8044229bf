//! The binary's one log path: every crate emits `tracing` events (the
//! engine, the NBD server, the CLI), and [`LineLayer`] writes each as one
//! line, logfmt (`ts=… level=info msg="…" key=value`) or JSON, to stderr.
//! An event's line carries the fields of the spans it happened in, outermost
//! first (`volume=vol0` for a volume's threads, `segment`, `from`, `to` for a
//! move, `conn` for an NBD connection), then its own. Timestamps are seconds
//! since start on the injected clock (the engine never reads wall time).
//!
//! `tracing` and `tracing-subscriber`'s registry are the ecosystem's
//! structured-logging core (spans across threads, zero cost when off); the
//! line format is ours because scripts already parse it and
//! `tracing-subscriber`'s own formatter has no logfmt.

use std::fmt::{self, Write as _};
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use tierd_common::clock::Clock;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

impl Level {
    pub fn parse(text: &str) -> Option<Level> {
        match text {
            "error" => Some(Level::Error),
            "warn" => Some(Level::Warn),
            "info" => Some(Level::Info),
            "debug" => Some(Level::Debug),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }

    fn from_u8(value: u8) -> Level {
        match value {
            0 => Level::Error,
            1 => Level::Warn,
            2 => Level::Info,
            _ => Level::Debug,
        }
    }

    fn of(level: &tracing::Level) -> Level {
        match *level {
            tracing::Level::ERROR => Level::Error,
            tracing::Level::WARN => Level::Warn,
            tracing::Level::INFO => Level::Info,
            _ => Level::Debug,
        }
    }
}

type Sink = dyn Fn(&str) + Send + Sync;

/// The level of an installed [`LineLayer`], changeable while it runs
/// (`tierd serve` on SIGHUP).
#[derive(Clone)]
pub struct LevelHandle(Arc<AtomicU8>);

impl LevelHandle {
    pub fn get(&self) -> Level {
        Level::from_u8(self.0.load(Ordering::Relaxed))
    }

    /// Sets the level; every callsite's cached interest is rebuilt so
    /// events newly enabled or disabled follow at once.
    pub fn set(&self, level: Level) {
        self.0.store(level as u8, Ordering::Relaxed);
        tracing::callsite::rebuild_interest_cache();
    }
}

/// Writes every event at `level` or above as one line.
pub struct LineLayer {
    level: LevelHandle,
    json: bool,
    clock: Arc<dyn Clock>,
    sink: Arc<Sink>,
}

impl LineLayer {
    /// Lines to stderr.
    pub fn stderr(level: Level, json: bool, clock: Arc<dyn Clock>) -> LineLayer {
        Self::to_sink(
            level,
            json,
            clock,
            Arc::new(|line: &str| {
                let mut stderr = std::io::stderr().lock();
                let _ = writeln!(stderr, "{line}");
            }),
        )
    }

    /// Lines into `sink` (tests).
    pub fn to_sink(level: Level, json: bool, clock: Arc<dyn Clock>, sink: Arc<Sink>) -> LineLayer {
        LineLayer {
            level: LevelHandle(Arc::new(AtomicU8::new(level as u8))),
            json,
            clock,
            sink,
        }
    }

    /// A handle that changes this layer's level after it is installed.
    pub fn level_handle(&self) -> LevelHandle {
        self.level.clone()
    }

    fn line(&self, level: Level, message: &str, fields: &[(&'static str, String)]) -> String {
        let seconds = self.clock.now_ns() as f64 / 1e9;
        if self.json {
            let mut object = serde_json::Map::new();
            object.insert(
                "ts".into(),
                serde_json::json!((seconds * 1e6).round() / 1e6),
            );
            object.insert("level".into(), level.name().into());
            object.insert("msg".into(), message.into());
            for (key, value) in fields {
                object.insert((*key).to_string(), value.clone().into());
            }
            serde_json::Value::Object(object).to_string()
        } else {
            let mut line = format!(
                "ts={seconds:.6} level={} msg={}",
                level.name(),
                quote(message)
            );
            for (key, value) in fields {
                let _ = write!(line, " {key}={}", quote(value));
            }
            line
        }
    }
}

/// A span's fields, kept in its extensions.
struct SpanFields(Vec<(&'static str, String)>);

/// Collects an event's or span's fields as text.
#[derive(Default)]
struct Collect {
    message: Option<String>,
    fields: Vec<(&'static str, String)>,
}

impl Collect {
    fn push(&mut self, field: &Field, value: String) {
        if field.name() == "message" {
            self.message = Some(value);
        } else {
            self.fields.push((field.name(), value));
        }
    }
}

impl Visit for Collect {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push(field, format!("{value:?}"));
    }
}

impl<S> Layer<S> for LineLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        // Spans are always kept (their fields go on the lines of the events
        // inside them); events below the level are not.
        metadata.is_span() || Level::of(metadata.level()) <= self.level.get()
    }

    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, context: Context<'_, S>) {
        let mut collect = Collect::default();
        attributes.record(&mut collect);
        if let Some(span) = context.span(id) {
            span.extensions_mut().insert(SpanFields(collect.fields));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, context: Context<'_, S>) {
        let mut collect = Collect::default();
        values.record(&mut collect);
        if let Some(span) = context.span(id) {
            if let Some(fields) = span.extensions_mut().get_mut::<SpanFields>() {
                fields.0.extend(collect.fields);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, context: Context<'_, S>) {
        let level = Level::of(event.metadata().level());
        if level > self.level.get() {
            return;
        }
        let mut collect = Collect::default();
        event.record(&mut collect);
        let mut fields = Vec::new();
        if let Some(scope) = context.event_scope(event) {
            for span in scope.from_root() {
                if let Some(span_fields) = span.extensions().get::<SpanFields>() {
                    fields.extend(span_fields.0.iter().cloned());
                }
            }
        }
        fields.extend(collect.fields);
        let message = collect.message.unwrap_or_default();
        (self.sink)(&self.line(level, &message, &fields));
    }
}

/// Installs `layer` as the process's log path (once; later calls keep the
/// first). Returns false when one was installed already.
pub fn install(layer: LineLayer) -> bool {
    use tracing_subscriber::layer::SubscriberExt;
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).is_ok()
}

fn quote(value: &str) -> String {
    if !value.is_empty()
        && value
            .chars()
            .all(|character| character.is_ascii_graphic() && character != '"' && character != '=')
    {
        value.to_string()
    } else {
        format!("{value:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use tierd_common::clock::ManualClock;
    use tracing_subscriber::layer::SubscriberExt;

    fn capture(level: Level, json: bool, action: impl FnOnce()) -> Vec<String> {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let captured = lines.clone();
        let sink: Arc<Sink> = Arc::new(move |line: &str| captured.lock().push(line.to_string()));
        let clock = Arc::new(ManualClock::new(1_500_000_000));
        let layer = LineLayer::to_sink(level, json, clock, sink);
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), action);
        let lines = lines.lock().clone();
        lines
    }

    #[test]
    fn the_level_changes_while_the_layer_runs() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let captured = lines.clone();
        let sink: Arc<Sink> = Arc::new(move |line: &str| captured.lock().push(line.to_string()));
        let layer = LineLayer::to_sink(Level::Warn, false, Arc::new(ManualClock::new(0)), sink);
        let handle = layer.level_handle();
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            tracing::info!("hidden at warn");
            handle.set(Level::Info);
            assert_eq!(handle.get(), Level::Info);
            tracing::info!("shown at info");
            handle.set(Level::Error);
            tracing::warn!("hidden at error");
        });
        let lines = lines.lock().clone();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("shown at info"), "{lines:?}");
    }

    #[test]
    fn logfmt_lines_carry_span_fields_outermost_first() {
        let lines = capture(Level::Info, false, || {
            let volume = tracing::info_span!("volume", volume = "vol0");
            let _volume = volume.enter();
            let moving = tracing::info_span!("move", segment = 7u32, from = "disk", to = "mem");
            let _moving = moving.enter();
            tracing::info!(
                detail = "util 0.9 > 0.7",
                bytes = 1048576u64,
                "move finished"
            );
            tracing::debug!("hidden");
        });
        assert_eq!(
            lines,
            ["ts=1.500000 level=info msg=\"move finished\" volume=vol0 segment=7 from=disk to=mem detail=\"util 0.9 > 0.7\" bytes=1048576"]
        );
    }

    #[test]
    fn json_lines_parse_and_hold_every_field() {
        let lines = capture(Level::Warn, true, || {
            let connection = tracing::info_span!("connection", conn = 3u64);
            let _connection = connection.enter();
            tracing::warn!(k = "v", "x \"quoted\"");
            tracing::info!("below the level");
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        let parsed: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(parsed["level"], "warn");
        assert_eq!(parsed["msg"], "x \"quoted\"");
        assert_eq!(parsed["conn"], "3");
        assert_eq!(parsed["k"], "v");
        assert_eq!(parsed["ts"], 1.5);
    }
}
