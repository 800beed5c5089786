//! OpenAI function tools and `tool_choice` → Gemini `tools` and `toolConfig`.

use serde_json::{json, Map, Value};

use super::parts::str_at;
use crate::providers::translate::TranslateError;

type Obj = Map<String, Value>;

/// Function tools → one Gemini tool of `functionDeclarations`. The schema goes to
/// `parametersJsonSchema` unchanged: it takes JSON Schema (`additionalProperties`, `$defs`,
/// `anyOf` included), where `parameters` takes only Vertex's OpenAPI subset and answers 400 to
/// keys OpenAI schemas routinely hold. `strict` has no equivalent and is dropped.
pub(super) fn tools(value: &Value) -> Result<Option<Value>, TranslateError> {
    let list = value.as_array().ok_or_else(|| TranslateError::new("tools", "must be an array"))?;
    let mut declarations = Vec::with_capacity(list.len());
    for (i, tool) in list.iter().enumerate() {
        let field = format!("tools[{i}]");
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            return Err(TranslateError::new(field, "only function tools are supported for Vertex Gemini models"));
        }
        let function = tool.get("function").ok_or_else(|| TranslateError::new(&field, "function is missing"))?;
        let name = str_at(tool, "/function/name", &field)?;
        let mut declaration = json!({ "name": name });
        if let Some(d) = function.get("description").filter(|d| !d.is_null()) {
            declaration["description"] = d.clone();
        }
        if let Some(p) = function.get("parameters").filter(|p| !p.is_null()) {
            declaration["parametersJsonSchema"] = p.clone();
        }
        declarations.push(declaration);
    }
    Ok((!declarations.is_empty()).then(|| json!([{ "functionDeclarations": declarations }])))
}

/// `tool_choice` → `toolConfig.functionCallingConfig`. `parallel_tool_calls: false` is refused
/// with tools: Gemini has no way to hold a turn to one call.
pub(super) fn tool_config(body: &Obj, out: &mut Obj) -> Result<(), TranslateError> {
    let declared: Vec<&str> = out
        .get("tools")
        .and_then(|t| t.pointer("/0/functionDeclarations"))
        .and_then(Value::as_array)
        .map(|d| d.iter().filter_map(|f| f.get("name").and_then(Value::as_str)).collect())
        .unwrap_or_default();
    if !declared.is_empty() && body.get("parallel_tool_calls") == Some(&Value::Bool(false)) {
        return Err(TranslateError::new("parallel_tool_calls", "false is not supported for Vertex Gemini models"));
    }
    let Some(choice) = body.get("tool_choice").filter(|c| !c.is_null()) else { return Ok(()) };
    let config = function_calling_config(choice, &declared)?;
    if declared.is_empty() {
        if config["mode"] == "NONE" || config["mode"] == "AUTO" {
            return Ok(());
        }
        return Err(TranslateError::new("tool_choice", "requires tools"));
    }
    out.insert("toolConfig".into(), json!({ "functionCallingConfig": config }));
    Ok(())
}

/// `auto` → `AUTO`, `none` → `NONE`, `required` → `ANY`, a named function → `ANY` limited to it.
fn function_calling_config(choice: &Value, declared: &[&str]) -> Result<Value, TranslateError> {
    let bad = || TranslateError::new("tool_choice", "must be \"auto\", \"none\", \"required\" or a function");
    let mode = match choice {
        Value::String(s) if s == "auto" => "AUTO",
        Value::String(s) if s == "none" => "NONE",
        Value::String(s) if s == "required" => "ANY",
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str).ok_or_else(bad)?;
            if !declared.is_empty() && !declared.contains(&name) {
                return Err(TranslateError::new("tool_choice.function.name", format!("{name:?} is not in tools")));
            }
            return Ok(json!({ "mode": "ANY", "allowedFunctionNames": [name] }));
        }
        _ => return Err(bad()),
    };
    Ok(json!({ "mode": mode }))
}
