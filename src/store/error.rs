//! Errors of the store.

/// Errors from the job store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database could not be opened or answered with an error.
    #[error("{what}: {source}")]
    Database {
        /// What was being done (`open /var/lib/…/serve.db`, `claim a job`).
        what: String,
        /// The driver's error.
        #[source]
        source: Driver,
    },
    /// The schema could not be created.
    #[error("cannot create the schema of {url}: {source}")]
    Schema {
        /// The database, without credentials.
        url: String,
        /// The driver's error.
        #[source]
        source: Driver,
    },
    /// A URL that names no store we have.
    #[error("unsupported database url {0:?}: use sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
    /// The directory of a SQLite file could not be created.
    #[error("cannot create {path}: {source}")]
    Io {
        /// The directory.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A thread of the store could not be started.
    #[error("cannot start {what}: {source}")]
    Thread {
        /// Which thread.
        what: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A SQLite statement could not be handed to a blocking thread: the runtime is shutting
    /// down.
    #[error("the SQLite store is shutting down")]
    ShuttingDown,
    /// A delivery could not be stored: a statement of its own, or its group's transaction,
    /// failed.
    #[error("cannot store delivery {delivery}: {what}: {source}")]
    Enqueue {
        /// `X-GitHub-Delivery`.
        delivery: String,
        /// What failed (`queue its job`, `commit`).
        what: &'static str,
        /// SQLite's error; one error of a group's transaction is every delivery's of it.
        #[source]
        source: std::sync::Arc<Driver>,
    },
    /// The SQLite delivery writer's thread is gone (only a panic ends it while the store is
    /// open): no delivery can be stored until the process restarts.
    #[error("the SQLite delivery writer has stopped; restart the server")]
    WriterStopped,
    /// A stored payload could not be decompressed.
    #[error("job {job}: stored payload is corrupt: {message}")]
    CorruptPayload {
        /// The job.
        job: String,
        /// What is wrong with it.
        message: String,
        /// The decompressor's error, where it has one.
        #[source]
        source: Option<lz4_flex::block::DecompressError>,
    },
    /// A row held a value this version does not know.
    #[error("job {job}: unknown state {state:?}")]
    UnknownState {
        /// The job.
        job: String,
        /// The value found.
        state: String,
    },
}

/// The error of one database's driver: sqlx for Postgres, rusqlite for SQLite.
#[derive(Debug, thiserror::Error)]
pub enum Driver {
    /// Postgres's driver.
    #[error(transparent)]
    Postgres(#[from] sqlx::Error),
    /// SQLite's driver.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

impl Error {
    /// `what` failed with a driver's error.
    pub(crate) fn db<E: Into<Driver>>(what: impl Into<String>) -> impl FnOnce(E) -> Error {
        let what = what.into();
        move |source| Error::Database {
            what,
            source: source.into(),
        }
    }
}

/// Results of the store.
pub type Result<T, E = Error> = std::result::Result<T, E>;
