//! Column values as the receipt append binds them (sqlx, rusqlite) and the receipt journal
//! holds them (JSON).

use std::sync::Arc;

/// A column value as bound. In the receipt journal a value is its JSON number or string (an
/// integer reads back as `Int`, a number with a fraction or exponent as `Real`: serde_json writes
/// every `f64` with one, and reads it back exactly; `Null` is `null`).
#[derive(Debug, Clone)]
pub enum Value {
    Int(i64),
    Real(f64),
    Text(Arc<str>),
    Static(&'static str),
    /// SQL NULL: an unknown value of a nullable column (`latency_us`).
    Null,
}
impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Real(a), Value::Real(b)) => a.to_bits() == b.to_bits(),
            (Value::Text(_) | Value::Static(_), Value::Text(_) | Value::Static(_)) => self.as_text() == other.as_text(),
            (Value::Null, Value::Null) => true,
            _ => false,
        }
    }
}

impl Value {
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(t) => Some(t),
            Value::Static(t) => Some(t),
            _ => None,
        }
    }
}

impl serde::Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Int(v) => s.serialize_i64(*v),
            Value::Real(v) => s.serialize_f64(*v),
            Value::Text(v) => s.serialize_str(v),
            Value::Static(v) => s.serialize_str(v),
            Value::Null => s.serialize_unit(),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Value {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Value;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number, a string or null")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
                Ok(Value::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
                i64::try_from(v).map(Value::Int).map_err(|_| E::custom("integer out of range"))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
                Ok(Value::Real(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Value, E> {
                Ok(Value::Text(v.into()))
            }
            fn visit_unit<E>(self) -> Result<Value, E> {
                Ok(Value::Null)
            }
        }
        d.deserialize_any(Visit)
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(match self {
            Value::Int(v) => ToSqlOutput::Borrowed(ValueRef::Integer(*v)),
            Value::Real(v) => ToSqlOutput::Borrowed(ValueRef::Real(*v)),
            Value::Text(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Value::Static(v) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
        })
    }
}
