//! The one error type of the library. Every variant prints as one line that names the file, offset or
//! config key at fault and what was expected, so the CLI can print it and exit with code 2.

use std::fmt;

/// Everything that can go wrong before or during a run because of its inputs.
#[derive(Debug)]
pub enum Error {
    /// A configuration key is unknown, malformed or out of range.
    Config {
        /// Dotted key (`mmu.l2_tlb.sets`) or file name plus key.
        key: String,
        /// What was expected.
        msg: String,
    },
    /// A trace file is malformed or truncated.
    Trace {
        /// The file.
        path: String,
        /// Byte offset (in the decompressed stream) where the problem starts.
        offset: u64,
        /// What was expected there.
        msg: String,
    },
    /// An I/O failure on a named file.
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        err: std::io::Error,
    },
    /// A name (design, workload, preset, ...) that does not exist.
    Unknown {
        /// What kind of thing ("design", "workload", ...).
        what: &'static str,
        /// The name given.
        name: String,
        /// The names that exist.
        known: Vec<String>,
    },
    /// A workload's parameter or setup failed.
    Workload {
        /// Workload name.
        name: String,
        /// What went wrong.
        msg: String,
    },
    /// The simulated machine ran out of physical memory.
    OutOfMemory(String),
    /// A translation disagrees with the OS's ground truth (checked mode), or a design's tables
    /// were asked for a mapping they cannot hold: either way, a bug in xlate.
    Check(String),
    /// The design cannot do what the run asks of it: a documented limit of the hardware it
    /// models (DIPTA has no synonyms; restrictive-only Utopia cannot share a page), not a bug.
    Unsupported(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config { key, msg } => write!(f, "config key `{key}`: {msg}"),
            Error::Trace { path, offset, msg } => write!(f, "trace {path}: at byte offset {offset}: {msg}"),
            Error::Io { path, err } => write!(f, "{path}: {err}"),
            Error::Unknown { what, name, known } => {
                write!(f, "unknown {what} `{name}`; expected one of: {}", known.join(", "))
            }
            Error::Workload { name, msg } => write!(f, "workload {name}: {msg}"),
            // A message that names its own remedy (Utopia's tables outside the RestSegs) does not
            // get the generic one, which would contradict it.
            Error::OutOfMemory(m) if m.contains("raise ") => write!(f, "simulated machine out of physical memory: {m}"),
            Error::OutOfMemory(m) => write!(
                f,
                "simulated machine out of physical memory: {m} (raise os.memory, or host.os.memory for a guest@host \
                 design, or let the OS swap with os.swap.enabled=true)"
            ),
            Error::Check(m) => write!(f, "translation check failed: {m}"),
            Error::Unsupported(m) => write!(f, "not supported by this design: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A config error for `key`.
    pub fn config(key: impl Into<String>, msg: impl Into<String>) -> Error {
        Error::Config { key: key.into(), msg: msg.into() }
    }
    /// An I/O error on `path`.
    pub fn io(path: impl Into<String>, err: std::io::Error) -> Error {
        Error::Io { path: path.into(), err }
    }
}
