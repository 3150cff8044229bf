//! Structured logs: one line per event, logfmt (`ts=… level=info msg="…"
//! key=value`) or JSON, to stderr. Timestamps are the engine clock's
//! seconds since start (the engine never reads wall time itself).

use std::io::Write;
use std::sync::Arc;

use tierd_common::clock::Clock;

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

    fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

type Sink = dyn Fn(&str) + Send + Sync;

/// A cheap-to-clone logger.
#[derive(Clone)]
pub struct Logger {
    level: Level,
    json: bool,
    clock: Arc<dyn Clock>,
    sink: Arc<Sink>,
}

impl Logger {
    /// Logs at `level` and above to stderr.
    pub fn stderr(level: Level, json: bool, clock: Arc<dyn Clock>) -> Logger {
        Logger {
            level,
            json,
            clock,
            sink: Arc::new(|line: &str| {
                let mut stderr = std::io::stderr().lock();
                let _ = writeln!(stderr, "{line}");
            }),
        }
    }

    /// Logs into `sink` (tests).
    pub fn to_sink(level: Level, json: bool, clock: Arc<dyn Clock>, sink: Arc<Sink>) -> Logger {
        Logger {
            level,
            json,
            clock,
            sink,
        }
    }

    pub fn enabled(&self, level: Level) -> bool {
        level <= self.level
    }

    pub fn log(&self, level: Level, message: &str, fields: &[(&str, &str)]) {
        if !self.enabled(level) {
            return;
        }
        let seconds = self.clock.now_ns() as f64 / 1e9;
        let line = if self.json {
            let mut object = serde_json::Map::new();
            object.insert(
                "ts".into(),
                serde_json::json!((seconds * 1e6).round() / 1e6),
            );
            object.insert("level".into(), level.name().into());
            object.insert("msg".into(), message.into());
            for (key, value) in fields {
                object.insert((*key).to_string(), (*value).into());
            }
            serde_json::Value::Object(object).to_string()
        } else {
            let mut line = format!(
                "ts={seconds:.6} level={} msg={}",
                level.name(),
                quote(message)
            );
            for (key, value) in fields {
                line.push(' ');
                line.push_str(key);
                line.push('=');
                line.push_str(&quote(value));
            }
            line
        };
        (self.sink)(&line);
    }

    pub fn error(&self, message: &str, fields: &[(&str, &str)]) {
        self.log(Level::Error, message, fields);
    }

    pub fn warn(&self, message: &str, fields: &[(&str, &str)]) {
        self.log(Level::Warn, message, fields);
    }

    pub fn info(&self, message: &str, fields: &[(&str, &str)]) {
        self.log(Level::Info, message, fields);
    }

    pub fn debug(&self, message: &str, fields: &[(&str, &str)]) {
        self.log(Level::Debug, message, fields);
    }
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

    #[test]
    fn logfmt_and_json_lines() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let captured = lines.clone();
        let sink: Arc<Sink> = Arc::new(move |line: &str| captured.lock().push(line.to_string()));
        let clock = Arc::new(ManualClock::new(1_500_000_000));
        let text = Logger::to_sink(Level::Info, false, clock.clone(), sink.clone());
        text.info(
            "move finished",
            &[("volume", "vol0"), ("detail", "util 0.9 > 0.7")],
        );
        text.debug("hidden", &[]);
        let json = Logger::to_sink(Level::Info, true, clock, sink);
        json.warn("x", &[("k", "v")]);
        let lines = lines.lock();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            "ts=1.500000 level=info msg=\"move finished\" volume=vol0 detail=\"util 0.9 > 0.7\""
        );
        let parsed: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(parsed["level"], "warn");
        assert_eq!(parsed["k"], "v");
    }
}
