//! Typed reads of an HF `config.json` value. Every failure names the key and the value found.

use serde_json::Value;

use crate::error::{Error, Result, Status};

/// A config object with the file it came from (for messages).
#[derive(Clone, Copy)]
pub struct Cfg<'a> {
    pub value: &'a Value,
    pub source: &'a str,
}

impl<'a> Cfg<'a> {
    pub fn new(value: &'a Value, source: &'a str) -> Self {
        Cfg { value, source }
    }

    /// The key's value, treating JSON `null` as absent (HF writes `"head_dim": null`).
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.value.get(key).filter(|v| !v.is_null())
    }

    fn bad(&self, key: &str, want: &str, got: &Value) -> Error {
        Error::format(format!("{}: \"{key}\" should be {want}, found {got}", self.source))
    }

    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| self.bad(key, "a non-negative integer", v)),
        }
    }

    pub fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?.ok_or_else(|| self.missing(key))
    }

    /// A positive integer (sizes and counts that would make the model empty when zero).
    pub fn positive(&self, key: &str) -> Result<usize> {
        let v = self.usize(key)?;
        if v == 0 {
            return Err(Error::format(format!("{}: \"{key}\" is 0", self.source)));
        }
        Ok(v)
    }

    /// A finite number, or None. Non-finite values never reach the arithmetic.
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| self.bad(key, "a finite number", v)),
        }
    }

    /// A number > 0 that stays finite and non-zero in f32, or None (rope bases and factors,
    /// scalars and caps that divide or are raised to a power).
    pub fn opt_positive_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.opt_f64(key)? {
            Some(x) if !(x > 0.0 && (x as f32).is_finite() && (x as f32) > 0.0) => Err(Error::format(format!(
                "{}: \"{key}\" = {x}: must be greater than 0 (and within f32 range)",
                self.source
            ))),
            other => Ok(other),
        }
    }

    pub fn f64(&self, key: &str) -> Result<f64> {
        self.opt_f64(key)?.ok_or_else(|| self.missing(key))
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| self.bad(key, "true or false", v)),
        }
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| self.bad(key, "a string", v)),
        }
    }

    pub fn str(&self, key: &str) -> Result<&'a str> {
        self.opt_str(key)?.ok_or_else(|| self.missing(key))
    }

    /// A sub-object, or None.
    pub fn opt_obj(&self, key: &str) -> Result<Option<Cfg<'a>>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) if v.is_object() => Ok(Some(Cfg { value: v, source: self.source })),
            Some(v) => Err(self.bad(key, "an object", v)),
        }
    }

    /// A list of token ids given as one integer or a list (`eos_token_id` may be either).
    pub fn token_ids(&self, key: &str) -> Result<Vec<u32>> {
        let to_id = |v: &Value| v.as_u64().and_then(|x| u32::try_from(x).ok());
        match self.get(key) {
            None => Ok(vec![]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| to_id(v).ok_or_else(|| self.bad(key, "a list of token ids", v)))
                .collect(),
            Some(v) => to_id(v).map(|x| vec![x]).ok_or_else(|| self.bad(key, "a token id", v)),
        }
    }

    /// A list of strings (`layer_types`).
    pub fn opt_str_list(&self, key: &str) -> Result<Option<Vec<&'a str>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().ok_or_else(|| self.bad(key, "a list of strings", v)))
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some(v) => Err(self.bad(key, "a list of strings", v)),
        }
    }

    /// A list of counts or indices (`mlp_only_layers`).
    pub fn opt_usize_list(&self, key: &str) -> Result<Option<Vec<usize>>> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_u64().and_then(|x| usize::try_from(x).ok()).ok_or_else(|| self.bad(key, "a list of non-negative integers", v)))
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some(v) => Err(self.bad(key, "a list of non-negative integers", v)),
        }
    }

    pub fn missing(&self, key: &str) -> Error {
        Error::format(format!("{}: missing \"{key}\"", self.source))
    }

    /// Refuses a value that makes the arithmetic meaningless (`ErrFormat`), naming the key.
    pub fn invalid(&self, key: &str, why: &str) -> Error {
        let got = self.get(key).map(|v| v.to_string()).unwrap_or_else(|| "absent".into());
        Error::format(format!("{}: \"{key}\" = {got}: {why}", self.source))
    }

    /// Refuses a count or size beyond a stated limit (see `semantics::MAX_LAYERS`...), so that
    /// nothing is allocated from it.
    pub fn limit(&self, key: &str, value: usize, max: usize) -> Result<()> {
        if value > max {
            return Err(Error::new(
                Status::ErrLimitExceeded,
                format!("{}: \"{key}\" = {value} is above the limit of {max}", self.source),
            ));
        }
        Ok(())
    }

    /// Refuses a value we do not implement, naming the key.
    pub fn refuse(&self, key: &str, why: &str) -> Error {
        let got = self.get(key).map(|v| v.to_string()).unwrap_or_else(|| "absent".into());
        Error::unsupported(format!("{}: \"{key}\" = {got}: {why}", self.source))
    }
}
