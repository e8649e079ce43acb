//! The zone the pages show times in, chosen by the reader: UTC (the default), each job's own
//! zone, or the browser's. The choice is a cookie (`sqlcron_zone`); the browser's zone is a
//! second cookie that `live.js` keeps equal to `Intl.DateTimeFormat().resolvedOptions().timeZone`,
//! because a server cannot know it otherwise. The JSON API always speaks UTC milliseconds.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono_tz::Tz;
use maud::{Markup, html};

use super::Web;
use super::auth::{cookie, same_origin};

/// The reader's choice.
const CHOICE: &str = "sqlcron_zone";
/// The browser's own zone, written by live.js.
const BROWSER: &str = "sqlcron_browser_zone";

/// Where a time is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shown {
    Utc,
    /// Each job's zone where a time belongs to one job; UTC elsewhere.
    Job,
    /// The browser's zone (known once live.js has run).
    Browser(Tz),
}

impl Shown {
    /// The reader's choice from the request's cookies; anything unknown is UTC.
    pub(crate) fn of(headers: &HeaderMap) -> Shown {
        match cookie(headers, CHOICE).as_deref() {
            Some("job") => Shown::Job,
            Some("browser") => cookie(headers, BROWSER)
                .and_then(|z| crate::schedule::parse_zone(&decode_slash(&z)).ok())
                .map_or(Shown::Utc, Shown::Browser),
            _ => Shown::Utc,
        }
    }

    /// `ms` as a wall-clock time with its zone's abbreviation; `job` is the zone of the job the
    /// time belongs to, if it belongs to one.
    pub(crate) fn at(self, ms: i64, job: Option<Tz>) -> String {
        let zone = match self {
            Shown::Utc => None,
            Shown::Job => job,
            Shown::Browser(tz) => Some(tz),
        };
        let Some(t) = chrono::DateTime::from_timestamp_millis(ms) else {
            return String::new();
        };
        match zone {
            None | Some(Tz::UTC) => t.format("%Y-%m-%d %H:%M:%SZ").to_string(),
            Some(tz) => t
                .with_timezone(&tz)
                .format("%Y-%m-%d %H:%M:%S %Z")
                .to_string(),
        }
    }

    /// In words, for a page's caption.
    pub(crate) fn name(self) -> String {
        match self {
            Shown::Utc => "UTC".into(),
            Shown::Job => "each job's zone".into(),
            Shown::Browser(tz) => tz.name().into(),
        }
    }

    fn value(self) -> &'static str {
        match self {
            Shown::Utc => "utc",
            Shown::Job => "job",
            Shown::Browser(_) => "browser",
        }
    }
}

/// Zone names travel in a cookie percent-encoded (`Europe%2FBerlin`, `Etc%2FGMT%2B5`).
fn decode_slash(z: &str) -> String {
    let mut out = String::new();
    let mut rest = z;
    while let Some((head, tail)) = rest.split_once('%') {
        out.push_str(head);
        match tail.get(..2).and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(b) if b.is_ascii() => {
                out.push(char::from(b));
                rest = &tail[2..];
            }
            _ => {
                out.push('%');
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The choice in the page header: a form that works without JavaScript (the browser's zone
/// needs it, and says so until live.js has set it).
pub(crate) fn picker(web: &Web, shown: Shown) -> Markup {
    html! {
        form.zone method="post" action=(web.href("/zone")) {
            label for="zone" { "Times in" }
            select #zone name="zone" {
                @for (value, text) in [("utc", "UTC"), ("job", "the job's zone"), ("browser", "this browser's zone")] {
                    option value=(value) selected[shown.value() == value] { (text) }
                }
            }
            button type="submit" { "Show" }
        }
    }
}

/// `POST /zone` with `zone=utc|job|browser`: keeps the choice for a year and sends the browser
/// back. Same-origin only, like every other form; no role needed (it changes nothing shared).
pub(crate) async fn choose(
    State(web): State<Web>,
    headers: HeaderMap,
    axum::Form(fields): axum::Form<Vec<(String, String)>>,
) -> Response {
    if let Err(why) = same_origin(&headers) {
        return (StatusCode::FORBIDDEN, format!("{why}\n")).into_response();
    }
    let choice = match fields
        .iter()
        .find(|(k, _)| k == "zone")
        .map(|(_, v)| v.as_str())
    {
        Some(c @ ("utc" | "job" | "browser")) => c,
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                "zone must be utc, job or browser\n",
            )
                .into_response();
        }
    };
    let path = if web.config.public_path.is_empty() {
        "/".to_string()
    } else {
        web.config.public_path.clone()
    };
    let mut response = super::actions::back(&web, &headers);
    let value = format!("{CHOICE}={choice}; Path={path}; SameSite=Strict; Max-Age=31536000");
    if let Ok(v) = header::HeaderValue::from_str(&value) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookies(c: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(header::COOKIE, c.parse().unwrap());
        m
    }

    #[test]
    fn the_choice_comes_from_the_cookies_and_defaults_to_utc() {
        assert_eq!(Shown::of(&HeaderMap::new()), Shown::Utc);
        assert_eq!(Shown::of(&with_cookies("sqlcron_zone=job")), Shown::Job);
        assert_eq!(
            Shown::of(&with_cookies(
                "sqlcron_zone=browser; sqlcron_browser_zone=Europe%2FBerlin"
            )),
            Shown::Browser(chrono_tz::Europe::Berlin)
        );
        // The browser's zone not known yet, or not a zone: UTC.
        assert_eq!(
            Shown::of(&with_cookies(
                "sqlcron_zone=browser; sqlcron_browser_zone=Etc%2FGMT%2B5"
            )),
            Shown::Browser(chrono_tz::Etc::GMTPlus5)
        );
        assert_eq!(Shown::of(&with_cookies("sqlcron_zone=browser")), Shown::Utc);
        assert_eq!(
            Shown::of(&with_cookies(
                "sqlcron_zone=browser; sqlcron_browser_zone=Mars%2FOlympus"
            )),
            Shown::Utc
        );
        assert_eq!(Shown::of(&with_cookies("sqlcron_zone=<b>")), Shown::Utc);
    }

    #[test]
    fn times_carry_their_zone() {
        // 2026-07-01 12:00:00 UTC
        let ms = 1_782_907_200_000;
        assert_eq!(Shown::Utc.at(ms, None), "2026-07-01 12:00:00Z");
        assert_eq!(
            Shown::Job.at(ms, Some(chrono_tz::Asia::Tokyo)),
            "2026-07-01 21:00:00 JST"
        );
        // Not a job's time: UTC even when each job's zone is chosen.
        assert_eq!(Shown::Job.at(ms, None), "2026-07-01 12:00:00Z");
        assert_eq!(
            Shown::Browser(chrono_tz::Europe::Berlin).at(ms, Some(chrono_tz::Asia::Tokyo)),
            "2026-07-01 14:00:00 CEST"
        );
    }
}
