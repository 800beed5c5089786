use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{json, Value};

use super::*;

/// The AWS SigV4 test suite's example key and time (aws-sig-v4-test-suite, 20150830T123600Z).
fn example_keys() -> AwsKeys {
    AwsKeys {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
        session_token: None,
    }
}

fn example_time() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_440_938_160)
}

fn authorization(added: &[(String, String)]) -> &str {
    added.iter().find(|(n, _)| n == "authorization").map(|(_, v)| v.as_str()).unwrap()
}

/// get-vanilla and post-vanilla from AWS's published test suite: the signer and our settings
/// reproduce AWS's own signatures.
#[test]
fn aws_test_suite_vanilla_vectors() {
    let scope = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
                 SignedHeaders=host;x-amz-date, Signature=";
    for (method, signature) in [
        ("GET", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
        ("POST", "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
    ] {
        let added = sign(
            &example_keys(),
            "us-east-1",
            "service",
            method,
            "https://example.amazonaws.com/",
            &[],
            b"",
            example_time(),
        )
        .unwrap();
        assert_eq!(authorization(&added), format!("{scope}{signature}"), "{method}");
        assert_eq!(added.iter().find(|(n, _)| n == "x-amz-date").unwrap().1, "20150830T123600Z");
    }
}

#[test]
fn adds_date_and_authorization_and_the_session_token_but_no_payload_hash_header() {
    let url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse";
    let headers = [("content-type", "application/json")];
    let added = sign(&example_keys(), "us-east-1", SIGNING_NAME, "POST", url, &headers, b"{}", example_time()).unwrap();
    let names: Vec<&str> = added.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["x-amz-date", "authorization"]);
    assert!(authorization(&added).contains("SignedHeaders=content-type;host;x-amz-date,"));

    let keys = AwsKeys { session_token: Some("FQoGZXIvYXdzEXAMPLE".into()), ..example_keys() };
    let added = sign(&keys, "us-east-1", SIGNING_NAME, "POST", url, &headers, b"{}", example_time()).unwrap();
    let names: Vec<&str> = added.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["x-amz-date", "authorization", "x-amz-security-token"]);
    assert_eq!(added[2].1, "FQoGZXIvYXdzEXAMPLE");
    assert!(authorization(&added).contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token,"));
}

#[test]
fn hop_by_hop_and_agent_headers_are_not_signed() {
    let url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse";
    let headers = [("User-Agent", "tollgate"), ("Connection", "keep-alive"), ("Accept", "application/json")];
    let added = sign(&example_keys(), "us-east-1", SIGNING_NAME, "POST", url, &headers, b"{}", example_time()).unwrap();
    assert!(authorization(&added).contains("SignedHeaders=accept;host;x-amz-date,"));
}

#[test]
fn model_ids_are_encoded_as_botocore_encodes_a_uri_label() {
    assert_eq!(
        model_path("anthropic.claude-3-haiku-20240307-v1:0", "converse"),
        "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
    );
    assert_eq!(
        model_path("arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-lite-v1:0", "converse-stream"),
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A%3Afoundation-model%2Famazon.nova-lite-v1%3A0/converse-stream"
    );
}

#[test]
fn bad_inputs_are_errors_not_panics_and_name_no_secret() {
    let keys = example_keys();
    let t = example_time();
    let url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse";
    for bad_url in ["/model/m/converse", "ftp://h/x", "not a url", "https:///x"] {
        assert_eq!(sign(&keys, "us-east-1", "bedrock", "POST", bad_url, &[], b"", t), Err(SignError::Url), "{bad_url}");
    }
    let err = sign(&keys, "us-east-1", "bedrock", "POST", url, &[("X-Amz-Date", "20200101T000000Z")], b"", t);
    assert_eq!(err, Err(SignError::SignerHeader("x-amz-date".into())));
    let no_secret = AwsKeys { secret_access_key: " ".into(), ..keys.clone() };
    let err = sign(&no_secret, "us-east-1", "bedrock", "POST", url, &[], b"", t);
    assert_eq!(err, Err(SignError::MissingField("secret_access_key")));
    assert_eq!(sign(&keys, "", "bedrock", "POST", url, &[], b"", t), Err(SignError::MissingField("region")));
    let err = sign(&keys, "us-east-1", "bedrock", "POST", url, &[("x-bad", "a\nb")], b"", t).unwrap_err();
    assert!(matches!(err, SignError::Signer(_)), "{err}");
    let with_token = AwsKeys { session_token: Some("tok\nen".into()), ..keys };
    let err = sign(&with_token, "us-east-1", "bedrock", "POST", url, &[], b"", t).unwrap_err();
    assert!(!err.to_string().contains("tok"), "{err}");
}

#[test]
fn debug_never_shows_the_secret_or_the_token() {
    let keys = AwsKeys { session_token: Some("SESSIONTOKEN".into()), ..example_keys() };
    let shown = format!("{keys:?}");
    assert!(shown.contains("AKIDEXAMPLE"), "{shown}");
    assert!(!shown.contains("EXAMPLEKEY") && !shown.contains("SESSIONTOKEN"), "{shown}");
}

/// The requests of tests/fixtures/bedrock/sigv4_vector.json: the shapes the gateway sends
/// (regional endpoint, `converse-stream` with temporary credentials, a stand-in `base_url`
/// with a port and an ARN model id).
fn vector_requests() -> Vec<Value> {
    let haiku = "anthropic.claude-3-haiku-20240307-v1:0";
    let arn = "arn:aws:bedrock:eu-west-1:123456789012:inference-profile/eu.anthropic.claude-3-haiku-20240307-v1:0";
    let temporary = AwsKeys {
        access_key_id: "ASIAEXAMPLETEMPORARY".into(),
        secret_access_key: "tEmPoRaRy/SeCrEt+KeY/EXAMPLE0123456789".into(),
        session_token: Some("IQoJb3JpZ2luX2VjEXAMPLE//////////wEaCXVzLWVhc3QtMSJH".into()),
    };
    vec![
        vector(
            "converse, long-term keys, regional endpoint",
            format!("https://bedrock-runtime.us-east-1.amazonaws.com{}", model_path(haiku, "converse")),
            json!([["content-type", "application/json"], ["accept", "application/json"]]),
            (&example_keys(), "us-east-1", 1_714_000_000),
        ),
        vector(
            "converse-stream, temporary credentials",
            format!("https://bedrock-runtime.us-west-2.amazonaws.com{}", model_path(haiku, "converse-stream")),
            json!([["content-type", "application/json"], ["accept", "application/vnd.amazon.eventstream"]]),
            (&temporary, "us-west-2", 1_714_000_123),
        ),
        vector(
            "stand-in base_url with a port, ARN model id, an unsigned user-agent",
            format!("http://127.0.0.1:18080{}", model_path(arn, "converse")),
            json!([["Content-Type", "application/json"], ["User-Agent", "tollgate/0.1"]]),
            (&example_keys(), "eu-west-1", 1_714_000_999),
        ),
    ]
}

/// One signed POST of a Converse body: who signs, where and when.
fn vector(name: &str, url: String, headers: Value, (keys, region, unix_time): (&AwsKeys, &str, u64)) -> Value {
    let body = r#"{"messages":[{"role":"user","content":[{"text":"Hello"}]}],"inferenceConfig":{"maxTokens":64}}"#;
    json!({
        "name": name, "method": "POST", "url": url, "headers": headers, "body": body,
        "access_key_id": keys.access_key_id, "secret_access_key": keys.secret_access_key,
        "session_token": keys.session_token, "region": region, "service": SIGNING_NAME, "unix_time": unix_time,
    })
}

fn sign_vector(v: &Value) -> Vec<(String, String)> {
    let s = |k: &str| v[k].as_str().unwrap();
    let keys = AwsKeys {
        access_key_id: s("access_key_id").into(),
        secret_access_key: s("secret_access_key").into(),
        session_token: v["session_token"].as_str().map(String::from),
    };
    let headers: Vec<(&str, &str)> =
        v["headers"].as_array().unwrap().iter().map(|h| (h[0].as_str().unwrap(), h[1].as_str().unwrap())).collect();
    let at = UNIX_EPOCH + Duration::from_secs(v["unix_time"].as_u64().unwrap());
    sign(&keys, s("region"), s("service"), s("method"), s("url"), &headers, s("body").as_bytes(), at).unwrap()
}

/// The committed vector is what this signer produces; tests/sdk/test_sigv4_vectors.py checks
/// the same vector with botocore, so the two signers are compared through this file.
/// `TOLLGATE_BLESS=1` rewrites it after a deliberate change.
#[test]
fn signatures_match_the_vector_botocore_checks() {
    let vectors: Vec<Value> = vector_requests()
        .into_iter()
        .map(|mut v| {
            let added: Vec<Value> = sign_vector(&v).into_iter().map(|(n, val)| json!([n, val])).collect();
            v["added_headers"] = Value::Array(added);
            v
        })
        .collect();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bedrock/sigv4_vector.json");
    let got = Value::Array(vectors);
    if std::env::var_os("TOLLGATE_BLESS").is_some() {
        std::fs::write(&path, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
    }
    let want: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(got, want, "{}", serde_json::to_string_pretty(&got).unwrap());
}
