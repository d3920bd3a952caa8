//! Errors of the store.

/// Errors from the job store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database could not be opened or answered with an error.
    #[error("{what}: {source}")]
    Database {
        /// What was being done (`open sqlite:/var/lib/…`, `claim a job`).
        what: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A connection of the store's own threads (the SQLite delivery writer, the checkpointer)
    /// could not be opened or set up.
    #[error("{what}: {source}")]
    Sqlite {
        /// What was being done (`open /var/lib/…/serve.db for the delivery writer`).
        what: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The schema could not be created.
    #[error("cannot create the schema of {url}: {source}")]
    Schema {
        /// The database, without credentials.
        url: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
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
    /// A delivery could not be stored: its group's transaction failed, or the writer stopped.
    #[error("cannot store delivery {delivery}: {message}")]
    Enqueue {
        /// `X-GitHub-Delivery`.
        delivery: String,
        /// What failed.
        message: String,
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

impl Error {
    pub(crate) fn db(what: impl Into<String>) -> impl FnOnce(sqlx::Error) -> Error {
        let what = what.into();
        move |source| Error::Database { what, source }
    }
}

/// Results of the store.
pub type Result<T, E = Error> = std::result::Result<T, E>;
