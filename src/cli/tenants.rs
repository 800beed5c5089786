//! `tollgate tenant create` and `tollgate key create`: a tenant or a key, printed once.

use std::process::ExitCode;

use super::args::ConfigArg;
use super::setup::{block_on, fail, load, notify_servers, open};
use crate::store;

pub(super) fn create_tenant(name: &str, json: bool, config: &ConfigArg) -> ExitCode {
    let name = name.trim().to_string();
    if name.is_empty() {
        return fail("--name must not be empty");
    }
    let result = load(config).and_then(|cfg| open(&cfg)).and_then(|store| {
        block_on(async {
            if store::tenants::by_name(&store, &name).await.map_err(fail)?.is_some() {
                return Err(fail(format!("a tenant named `{name}` already exists")));
            }
            let t = store::tenants::create(&store, &name).await.map_err(fail)?;
            let (key, key_id) =
                crate::keys::issue(&store, &t.id, "manager", "tenant manager key").await.map_err(fail)?;
            notify_servers(&store).await;
            Ok((t.id, key_id, key))
        })
    });
    match result {
        Ok((t, k, key)) => {
            print_key(json, &t, &k, &key);
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

pub(super) fn create_key(tenant: &str, role: &str, label: &str, json: bool, config: &ConfigArg) -> ExitCode {
    let result = load(config).and_then(|cfg| open(&cfg)).and_then(|store| {
        block_on(async {
            if !store::tenants::exists(&store, tenant).await.map_err(fail)? {
                return Err(fail(format!("no tenant with id `{tenant}`")));
            }
            let made = crate::keys::issue(&store, tenant, role, label).await.map_err(fail)?;
            notify_servers(&store).await;
            Ok(made)
        })
    });
    match result {
        Ok((key, key_id)) => {
            print_key(json, tenant, &key_id, &key);
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

fn print_key(json: bool, tenant_id: &str, key_id: &str, key: &str) {
    if json {
        println!("{}", serde_json::json!({ "tenantId": tenant_id, "keyId": key_id, "key": key }));
    } else {
        println!("tenant: {tenant_id}\nkey id: {key_id}\nkey:    {key}\n(the key is shown once; store it now)");
    }
}
