//! The grant against a stand-in token endpoint on a real socket. The stand-in verifies each
//! assertion with the service account's public key, as Google does, and refuses what fails.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::signature::KeyPair as _;
use base64::Engine;
use jsonwebtoken::{DecodingKey, Validation};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;

use super::*;
use crate::upstream::Timeouts;

const EMAIL: &str = "gateway@tollgate-test.iam.gserviceaccount.com";
const KEY_ID: &str = "4f6c0a1b2c3d4e5f";
/// The stand-in's answer gate: a test that takes all permits holds every answer back.
const GATE: u32 = 1 << 16;

/// One RSA key pair for the whole test binary (generation is the slow part): the private key
/// as a PKCS#8 PEM, as Google's key files hold it, and the public key as PKCS#1 DER.
fn keys() -> &'static (String, Vec<u8>) {
    static KEYS: OnceLock<(String, Vec<u8>)> = OnceLock::new();
    KEYS.get_or_init(|| {
        let pair = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        let der = pair.as_der().unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
        let pem = format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n", lines.join("\n"));
        (pem, pair.public_key().as_ref().to_vec())
    })
}

fn key_file(token_uri: &str) -> Value {
    json!({
        "type": "service_account",
        "project_id": "tollgate-test",
        "private_key_id": KEY_ID,
        "private_key": keys().0,
        "client_email": EMAIL,
        "client_id": "1234567890",
        "token_uri": token_uri,
    })
}

/// What the stand-in answers to a grant that verifies.
#[derive(Clone, Copy)]
enum Answer {
    Grant { expires_in: u64 },
    Refuse { status: u16, body: &'static str },
}

struct StandIn {
    token_uri: String,
    requests: Arc<AtomicUsize>,
    /// Opened by the test when answers should go out (single-flight: hold the first one).
    gate: Arc<Semaphore>,
}

impl StandIn {
    async fn start(answer: Answer) -> StandIn {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let token_uri = format!("http://127.0.0.1:{}/oauth2/v4/token", listener.local_addr().unwrap().port());
        let requests = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Semaphore::new(GATE as usize));
        let (uri, count, g) = (token_uri.clone(), requests.clone(), gate.clone());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (uri, count, g) = (uri.clone(), count.clone(), g.clone());
                tokio::spawn(async move {
                    let (got, body_at) = crate::upstream::tests::read_request(&mut conn).await;
                    let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                    let (status, body) = match check_grant(&got, body_at, &uri) {
                        Err(why) => (400, json!({"error": "invalid_grant", "error_description": why}).to_string()),
                        Ok(()) => match answer {
                            Answer::Grant { expires_in } => {
                                (200, json!({"access_token": format!("token-{n}"), "expires_in": expires_in, "token_type": "Bearer"}).to_string())
                            }
                            Answer::Refuse { status, body } => (status, body.to_string()),
                        },
                    };
                    let _held = g.acquire().await.unwrap();
                    let head = format!("HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
                    let _ = conn.write_all(format!("{head}{body}").as_bytes()).await;
                });
            }
        });
        StandIn { token_uri, requests, gate }
    }

    fn account(&self) -> ServiceAccount {
        ServiceAccount::parse(&key_file(&self.token_uri).to_string()).unwrap()
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// What Google checks of a JWT-bearer grant: the form, the signature with the account's
/// public key, and the claims and header a service-account assertion must carry.
fn check_grant(request: &[u8], body_at: usize, token_uri: &str) -> Result<(), String> {
    let head = String::from_utf8_lossy(&request[..body_at]).to_lowercase();
    if !head.starts_with("post /oauth2/v4/token http/1.1")
        || !head.contains("content-type: application/x-www-form-urlencoded")
    {
        return Err(format!("not a form POST to the token path: {head}"));
    }
    let body = std::str::from_utf8(&request[body_at..]).map_err(|_| "body not UTF-8")?;
    let mut fields = body.split('&').filter_map(|kv| kv.split_once('='));
    if fields.next() != Some(("grant_type", "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer")) {
        return Err(format!("wrong grant_type in {body}"));
    }
    let assertion = fields.next().filter(|(k, _)| *k == "assertion").ok_or("no assertion")?.1;
    let mut validation = Validation::new(Algorithm::RS256);
    validation.set_audience(&[token_uri]);
    validation.set_issuer(&[EMAIL]);
    validation.set_required_spec_claims(&["exp", "iat", "aud", "iss"]);
    let key = DecodingKey::from_rsa_der(&keys().1);
    let data = jsonwebtoken::decode::<GrantClaims>(assertion, &key, &validation).map_err(|e| format!("JWT: {e}"))?;
    let claims = data.claims;
    if claims.scope != CLOUD_PLATFORM_SCOPE || claims.exp - claims.iat != 3600 {
        return Err(format!("scope {} or lifetime {} wrong", claims.scope, claims.exp - claims.iat));
    }
    if data.header.kid.as_deref() != Some(KEY_ID) {
        return Err(format!("kid {:?}", data.header.kid));
    }
    Ok(())
}

fn new_cache(timing: CacheTiming) -> TokenCache {
    let t = Duration::from_secs(10);
    TokenCache::new(Arc::new(UpstreamClient::new(Timeouts { connect: t, read: t, idle_pool: t }, "")), timing)
}

#[tokio::test]
async fn a_verified_grant_yields_a_token_that_is_reused() {
    let standin = StandIn::start(Answer::Grant { expires_in: 3599 }).await;
    let (cache, account) = (new_cache(CacheTiming::default()), standin.account());
    let first = cache.token(&account).await.unwrap();
    assert_eq!(first.token.expose(), "token-1");
    let second = cache.token(&account).await.unwrap();
    assert_eq!(second.token.expose(), "token-1");
    assert_eq!(standin.requests(), 1, "the second call is answered from the cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_callers_share_one_refresh() {
    let standin = StandIn::start(Answer::Grant { expires_in: 3599 }).await;
    // Hold the endpoint's answer until every caller has started and queued behind the first.
    let held = standin.gate.acquire_many(GATE).await.unwrap();
    let (cache, account) = (Arc::new(new_cache(CacheTiming::default())), standin.account());
    let started = Arc::new(tokio::sync::Barrier::new(17));
    let callers: Vec<_> = (0..16)
        .map(|_| {
            let (cache, account, started) = (cache.clone(), account.clone(), started.clone());
            tokio::spawn(async move {
                started.wait().await;
                cache.token(&account).await.map(|t| t.token.expose().to_string())
            })
        })
        .collect();
    started.wait().await;
    while standin.requests() == 0 {
        tokio::task::yield_now().await;
    }
    drop(held);
    for caller in callers {
        assert_eq!(caller.await.unwrap().unwrap(), "token-1");
    }
    assert_eq!(standin.requests(), 1, "one grant for sixteen concurrent callers");
}

#[tokio::test]
async fn an_expired_token_is_replaced() {
    // A token that expires at once is due for refresh on the next call.
    let standin = StandIn::start(Answer::Grant { expires_in: 0 }).await;
    let (cache, account) = (new_cache(CacheTiming::default()), standin.account());
    assert_eq!(cache.token(&account).await.unwrap().token.expose(), "token-1");
    assert_eq!(cache.token(&account).await.unwrap().token.expose(), "token-2");
    assert_eq!(standin.requests(), 2);
}

#[test]
fn tokens_are_refreshed_a_margin_before_expiry_or_halfway() {
    let t0 = Instant::now();
    let margin = Duration::from_secs(300);
    assert_eq!(refresh_at(t0, t0 + Duration::from_secs(3600), margin), t0 + Duration::from_secs(3300));
    assert_eq!(refresh_at(t0, t0 + Duration::from_secs(100), margin), t0 + Duration::from_secs(50));
    assert_eq!(refresh_at(t0, t0, margin), t0);
}

#[tokio::test]
async fn a_refusal_names_the_status_and_reason_and_is_held_briefly() {
    let body = r#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#;
    let standin = StandIn::start(Answer::Refuse { status: 400, body }).await;
    let hold = CacheTiming { failure_hold: Duration::from_secs(3600), ..CacheTiming::default() };
    let (cache, account) = (new_cache(hold), standin.account());
    let err = cache.token(&account).await.unwrap_err();
    let text = err.to_string();
    for part in ["HTTP 400", "invalid_grant", "Invalid JWT Signature.", standin.token_uri.as_str()] {
        assert!(text.contains(part), "{part} missing from: {text}");
    }
    assert!(!text.contains("eyJ") && !text.contains("PRIVATE"), "no assertion or key in: {text}");
    assert_eq!(err.api_error().status(), 502);
    assert_eq!(cache.token(&account).await.unwrap_err(), err);
    assert_eq!(standin.requests(), 1, "the failure is answered from the cache while held");

    let no_hold = new_cache(CacheTiming { failure_hold: Duration::ZERO, ..CacheTiming::default() });
    no_hold.token(&account).await.unwrap_err();
    no_hold.token(&account).await.unwrap_err();
    assert_eq!(standin.requests(), 3, "after the hold, the next call asks again");
}

#[tokio::test]
async fn an_endpoint_that_answers_nonsense_is_refused() {
    let standin = StandIn::start(Answer::Refuse { status: 503, body: "<html>down</html>" }).await;
    let err = new_cache(CacheTiming::default()).token(&standin.account()).await.unwrap_err();
    assert!(err.to_string().ends_with("HTTP 503 with a body that is not JSON"), "{err}");
    let standin = StandIn::start(Answer::Refuse { status: 200, body: r#"{"token_type":"Bearer"}"# }).await;
    let err = new_cache(CacheTiming::default()).token(&standin.account()).await.unwrap_err();
    assert!(err.to_string().ends_with("HTTP 200 without an `access_token`"), "{err}");
    assert_eq!(err.api_error().status(), 502);
}

#[tokio::test]
async fn an_unreachable_endpoint_is_a_502() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://127.0.0.1:{}/token", closed.local_addr().unwrap().port());
    drop(closed);
    let account = ServiceAccount::parse(&key_file(&uri).to_string()).unwrap();
    let err = new_cache(CacheTiming::default()).token(&account).await.unwrap_err();
    assert!(matches!(err, VertexAuthError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains(&uri), "{err}");
    assert_eq!(err.api_error().status(), 502);
}

/// The message for a key file with `change` applied (a `null` removes the field).
fn parse_error(change: Value) -> String {
    let mut file = key_file("https://oauth2.googleapis.com/token");
    for (k, v) in change.as_object().unwrap() {
        match v {
            Value::Null => file.as_object_mut().unwrap().remove(k),
            v => file.as_object_mut().unwrap().insert(k.clone(), v.clone()),
        };
    }
    let err = ServiceAccount::parse(&file.to_string()).unwrap_err();
    assert_eq!(err.api_error().status(), 400);
    let text = err.to_string();
    assert!(
        text.starts_with("field service_account_json: ") && !text.contains(keys().0.lines().nth(2).unwrap()),
        "{text}"
    );
    text
}

#[test]
fn a_broken_key_file_names_what_is_wrong() {
    let err = ServiceAccount::parse("{\"type\": \"service_account\",").unwrap_err().to_string();
    assert!(err.contains("not a JSON document (line 1, column 27)"), "{err}");
    assert!(parse_error(json!({"client_email": null})).ends_with("missing `client_email`"));
    assert!(parse_error(json!({"private_key_id": ""})).ends_with("`private_key_id` is empty"));
    assert!(parse_error(json!({"project_id": 7})).ends_with("`project_id` must be a string"));
    assert!(parse_error(json!({"type": "authorized_user"})).contains("`type` is `authorized_user`"));
    assert!(parse_error(json!({"token_uri": "ftp://example.com/token"})).contains("`token_uri`"));
    let not_pem = parse_error(json!({"private_key": "hunter2"}));
    assert!(not_pem.contains("`private_key` is not a PEM-encoded RSA private key") && !not_pem.contains("hunter2"));
    // An EC key in the right PEM wrapping is still not an RSA key.
    let ec = rcgen::KeyPair::generate().unwrap().serialize_pem();
    assert!(parse_error(json!({"private_key": ec})).contains("`private_key` is not"));
    // An RSA label around bytes that are not a key.
    let junk = "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD9\n-----END RSA PRIVATE KEY-----\n";
    assert!(parse_error(json!({"private_key": junk})).contains("`private_key` is not"));
}

#[test]
fn a_key_file_without_token_uri_uses_googles_endpoint() {
    let mut file = key_file("unused");
    file.as_object_mut().unwrap().remove("token_uri");
    let account = ServiceAccount::parse(&file.to_string()).unwrap();
    assert_eq!(account.token_uri, DEFAULT_TOKEN_URI);
    assert_eq!(
        (account.endpoint.base.host.as_str(), account.endpoint.path.as_str()),
        ("oauth2.googleapis.com", "/token")
    );
    assert!(!format!("{account:?}").contains("PRIVATE"), "Debug never shows the key");
}
