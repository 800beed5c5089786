//! `tollgate signing-key rotate`: a new receipt signing key; the old one stays, retired.

use std::process::ExitCode;

use super::args::ConfigArg;
use super::setup::{block_on, fail, load, open};
use crate::receipts::signer::{self, Signer};

pub(super) fn rotate(arg: &ConfigArg) -> ExitCode {
    let result = load(arg).and_then(|cfg| Ok((open(&cfg)?, cfg))).and_then(|(store, cfg)| {
        let (old, new) = Signer::rotate_file(&cfg.signing_key_path()).map_err(fail)?;
        block_on(async {
            signer::register(&store, &old).await.map_err(fail)?;
            signer::retire(&store, &old.key_id).await.map_err(fail)?;
            signer::register(&store, &new).await.map_err(fail)
        })?;
        Ok((old.key_id.clone(), new.key_id.clone()))
    });
    match result {
        Ok((old, new)) => {
            println!("retired signing key {old}; active signing key {new} (restart `tollgate serve` to use it)");
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}
