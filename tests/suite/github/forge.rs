//! The GitHub forge against the fake API on loopback.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use git_agent::forge::github::{Auth, GitHub, GitHubOptions, RetryPolicy};
use git_agent::forge::{CommentTarget, Error, Forge, Permission, PrRequest, progress_marker};
use git_agent::task::RepoRef;
use git_agent::workspace::Repo;
use secrecy::ExposeSecret as _;
use serde_json::json;

use super::fake::{Canned, Fake};
use crate::suite::common::git;

fn repo() -> RepoRef {
    RepoRef {
        owner: "octocat".into(),
        name: "Hello-World".into(),
    }
}

fn options(fake: &Fake) -> GitHubOptions {
    GitHubOptions {
        api_base: fake.api_base(),
        // No client time-outs: under a paused clock they would fire while a request is in
        // flight on loopback.
        connect_timeout: None,
        read_timeout: None,
        ..GitHubOptions::default()
    }
}

fn client(fake: &Fake) -> GitHub {
    GitHub::new(Auth::Token("ghp_test_token".into()), options(fake)).unwrap()
}

#[tokio::test]
async fn issue_pr_and_permissions_parse_the_documented_responses() {
    let fake = Fake::start("").await;
    fake.add_issue(7, "Parser rejects week dates", "Steps: …", "alice", false);
    fake.add_comment(7, "alice", false, "Also `2024-W01`.");
    fake.add_comment(7, "ci[bot]", true, "beep");
    fake.add_pull(8, "agent/7-week-dates", "main", "octocat/Hello-World");
    for (login, perm, role) in [
        ("ada", "admin", "admin"),
        ("max", "write", "maintain"),
        ("wes", "write", "write"),
        ("tri", "read", "triage"),
        ("rea", "read", "read"),
        ("cus", "write", "custom-role"),
    ] {
        fake.grant(login, perm, role);
    }
    let gh = client(&fake);
    let issue = gh.issue(&repo(), 7).await.unwrap();
    assert_eq!(issue.title, "Parser rejects week dates");
    assert!(!issue.is_pull_request);
    assert_eq!(issue.comments.len(), 2);
    assert_eq!(issue.comments[0].body, "Also `2024-W01`.");
    assert!(issue.comments[1].author.is_bot);
    let pr = gh.pull_request(&repo(), 8).await.unwrap();
    assert_eq!(pr.head_ref, "agent/7-week-dates");
    assert_eq!(pr.head_repo.as_deref(), Some("octocat/Hello-World"));
    let expect = [
        ("ada", Permission::Admin),
        ("max", Permission::Maintain),
        ("wes", Permission::Write),
        ("tri", Permission::Triage),
        ("rea", Permission::Read),
        ("cus", Permission::Write),
        ("nobody", Permission::None),
    ];
    for (login, want) in expect {
        assert_eq!(
            gh.permission(&repo(), login).await.unwrap(),
            want,
            "{login}"
        );
    }
    let auth = fake.requests("GET", "/issues/7")[0].authorization.clone();
    assert_eq!(auth.as_deref(), Some("Bearer ghp_test_token"));
    fake.assert_clean();
}

#[tokio::test]
async fn comments_are_read_across_pages() {
    let fake = Fake::start("").await;
    fake.add_issue(3, "t", "b", "alice", false);
    for i in 0..230 {
        fake.add_comment(3, "alice", false, &format!("comment {i}"));
    }
    let issue = client(&fake).issue(&repo(), 3).await.unwrap();
    assert_eq!(issue.comments.len(), 230);
    assert_eq!(issue.comments[229].body, "comment 229");
    assert_eq!(fake.requests("GET", "/issues/3/comments").len(), 3);
    fake.assert_clean();
}

#[tokio::test]
async fn draft_pr_is_opened_once_then_updated() {
    let fake = Fake::start("").await;
    let gh = client(&fake);
    let req = PrRequest {
        title: "Accept ISO week dates".into(),
        body: "first report".into(),
        head: "agent/42-week-dates".into(),
        base: "main".into(),
    };
    let first = gh.open_draft_pr(&repo(), &req).await.unwrap();
    assert!(first.draft, "PRs are drafts");
    let posted = fake.requests("POST", "/pulls");
    assert_eq!(posted.len(), 1);
    let sent: serde_json::Value = serde_json::from_str(&posted[0].body).unwrap();
    assert_eq!(sent["draft"], json!(true));
    // A resumed run opens again: the same PR is updated, none is added.
    let again = PrRequest {
        body: git_agent::audit::redact::Redactor::new::<_, &str>([])
            .unwrap()
            .clean(&"x".repeat(70_000)),
        ..req.clone()
    };
    let second = gh.open_draft_pr(&repo(), &again).await.unwrap();
    assert_eq!(second.number, first.number);
    assert_eq!(fake.world().pulls.len(), 1);
    assert_eq!(fake.requests("POST", "/pulls").len(), 1);
    let body = fake.world().pulls[0]["body"].as_str().unwrap().to_string();
    assert!(body.chars().count() <= 65_536, "body cut to GitHub's limit");
    assert!(body.starts_with("xxxx"));
    fake.assert_clean();
}

// Regression: two deliveries racing to open the PR; GitHub answers the loser 422.
#[tokio::test]
async fn pr_already_exists_422_is_success_and_updates_it() {
    let fake = Fake::start("").await;
    fake.world().pr_race = true;
    let gh = client(&fake);
    let req = PrRequest {
        title: "Fix".into(),
        body: "the report".into(),
        head: "agent/9-fix".into(),
        base: "main".into(),
    };
    let pr = gh.open_draft_pr(&repo(), &req).await.unwrap();
    assert_eq!(pr.head_ref, "agent/9-fix");
    assert_eq!(fake.world().pulls.len(), 1);
    assert_eq!(
        fake.requests("PATCH", "/pulls/").len(),
        1,
        "existing PR updated"
    );
    assert_eq!(fake.world().pulls[0]["body"], json!("the report"));
    fake.assert_clean();
}

#[tokio::test]
async fn progress_comment_is_created_once_and_edited_in_place() {
    let fake = Fake::start("").await;
    fake.add_issue(5, "t", "b", "alice", false);
    // Someone pastes the marker into their own comment: it must not capture the progress.
    fake.add_comment(
        5,
        "mallory",
        false,
        &format!("{} hi", progress_marker("01RUN")),
    );
    let c1 = client(&fake)
        .upsert_progress(&repo(), 5, "01RUN", &"state: planning".into())
        .await
        .unwrap();
    // A new process (resumed run) finds the comment again by its marker.
    let c2 = client(&fake)
        .upsert_progress(&repo(), 5, "01RUN", &"state: testing".into())
        .await
        .unwrap();
    assert_eq!(c1.id, c2.id);
    let gh = client(&fake);
    gh.upsert_progress(&repo(), 5, "01RUN", &"state: succeeded".into())
        .await
        .unwrap();
    let bots: Vec<String> = fake
        .world()
        .comments
        .iter()
        .filter(|(_, c)| c["user"]["type"] == "Bot")
        .map(|(_, c)| c["body"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(bots.len(), 1, "one progress comment per run");
    assert!(bots[0].contains(&progress_marker("01RUN")));
    assert!(bots[0].ends_with("state: succeeded"));
    // Another run on the same issue gets its own comment.
    gh.upsert_progress(&repo(), 5, "02RUN", &"state: queued".into())
        .await
        .unwrap();
    assert_eq!(fake.requests("POST", "/issues/5/comments").len(), 2);
    fake.assert_clean();
}

#[tokio::test]
async fn eyes_on_issue_and_review_comments() {
    let fake = Fake::start("").await;
    let gh = client(&fake);
    gh.react_eyes(&repo(), CommentTarget::IssueComment(11))
        .await
        .unwrap();
    gh.react_eyes(&repo(), CommentTarget::IssueComment(11))
        .await
        .unwrap();
    gh.react_eyes(&repo(), CommentTarget::ReviewComment(12))
        .await
        .unwrap();
    let r = fake.world().reactions.clone();
    assert_eq!(r.len(), 3);
    assert!(r.iter().all(|(_, c)| c == "eyes"));
    assert!(r[2].0.ends_with("/pulls/comments/12/reactions"));
    fake.assert_clean();
}

#[tokio::test]
async fn failed_jobs_and_their_logs_without_leaking_the_token() {
    let fake = Fake::start("").await;
    let template = super::fake::Spec::get().component_example("job");
    let mut failed = template.clone();
    failed["id"] = json!(71);
    failed["name"] = json!("test");
    failed["conclusion"] = json!("failure");
    failed["steps"] = json!([
        {"name": "checkout", "status": "completed", "conclusion": "success", "number": 1},
        {"name": "cargo test", "status": "completed", "conclusion": "failure", "number": 2}
    ]);
    let mut ok = template.clone();
    ok["id"] = json!(72);
    ok["conclusion"] = json!("success");
    fake.world().jobs.insert(900, vec![failed, ok]);
    fake.world().logs.insert(71, "line\nerror: boom\n".into());
    let gh = client(&fake);
    let jobs = gh.failed_jobs(&repo(), 900).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].name, "test");
    assert_eq!(jobs[0].failed_steps, vec!["cargo test".to_string()]);
    let log = gh.job_log(&repo(), 71).await.unwrap();
    assert_eq!(log, "line\nerror: boom\n");
    assert!(
        fake.world().blob_auth.is_empty(),
        "token sent to blob storage"
    );
    fake.assert_clean();
}

#[tokio::test]
async fn enterprise_server_base_path_is_kept() {
    let fake = Fake::start("/api/v3").await;
    fake.grant("ada", "admin", "admin");
    let gh = client(&fake);
    assert_eq!(
        gh.permission(&repo(), "ada").await.unwrap(),
        Permission::Admin
    );
    assert!(
        fake.world()
            .seen
            .iter()
            .all(|s| !s.path.starts_with("/api"))
    );
    fake.assert_clean();
}

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn app_key() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    openssl(
        &["genrsa", "-traditional", "-out", "key.pem", "2048"],
        dir.path(),
    );
    openssl(
        &["rsa", "-in", "key.pem", "-pubout", "-out", "pub.pem"],
        dir.path(),
    );
    let private = std::fs::read_to_string(dir.path().join("key.pem")).unwrap();
    let public = std::fs::read_to_string(dir.path().join("pub.pem")).unwrap();
    (dir, private, public)
}

#[tokio::test]
async fn app_auth_mints_caches_and_refreshes_installation_tokens() {
    let (_dir, private, public) = app_key();
    let fake = Fake::start("").await;
    fake.world().app = Some((4242, public));
    fake.grant("ada", "admin", "admin");
    let auth = Auth::App {
        app_id: 4242,
        private_key_pem: private.clone().into(),
        installation_id: 77,
    };
    let gh = GitHub::new(auth.clone(), options(&fake)).unwrap();
    if let Err(e) = gh.permission(&repo(), "ada").await {
        panic!("{e}: {:?}", fake.world().violations);
    }
    gh.permission(&repo(), "ada").await.unwrap();
    assert_eq!(fake.world().tokens_minted, 1, "token cached between calls");
    let calls = fake.requests("GET", "/permission");
    assert!(
        calls
            .iter()
            .all(|c| c.authorization.as_deref() == Some("Bearer ghs_fake_installation_token_1"))
    );
    assert_eq!(
        gh.git_token().await.unwrap().expose_secret(),
        "ghs_fake_installation_token_1"
    );
    assert_eq!(fake.world().tokens_minted, 1);

    // A token that expires within the refresh margin is replaced before use.
    fake.world().token_lifetime_s = 20;
    let gh = GitHub::new(auth, options(&fake)).unwrap();
    gh.permission(&repo(), "ada").await.unwrap();
    gh.permission(&repo(), "ada").await.unwrap();
    assert_eq!(fake.world().tokens_minted, 3, "near-expiry token refreshed");
    let bad = GitHub::new(
        Auth::App {
            app_id: 1,
            private_key_pem: "not a key".into(),
            installation_id: 1,
        },
        options(&fake),
    );
    assert!(matches!(bad, Err(Error::Auth { .. })));
    fake.assert_clean();
}

#[tokio::test]
async fn push_sends_only_the_run_branch() {
    let fake = Fake::start("").await;
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    let bare = tmp.path().join("remote.git");
    std::fs::create_dir_all(&work).unwrap();
    git(tmp.path(), &["init", "--bare", "remote.git"]);
    git(&work, &["init"]);
    std::fs::write(work.join("a.txt"), "a").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-m", "a"]);
    git(&work, &["branch", "agent/1-fix"]);
    let local = Repo::open(&work).unwrap();
    let gh = client(&fake);
    let remote = bare.to_str().unwrap();
    gh.push(
        local.clone(),
        remote,
        &["refs/heads/agent/1-fix".into()],
        "agent/",
    )
    .await
    .unwrap();
    let out = Command::new("git")
        .args(["--git-dir", remote, "for-each-ref", "--format=%(refname)"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "refs/heads/agent/1-fix"
    );
    let refused = gh
        .push(local, remote, &["refs/heads/main".into()], "agent/")
        .await;
    assert!(matches!(refused, Err(Error::Push { .. })), "{refused:?}");
}

fn canned(status: u16, headers: &[(&str, String)], body: &str) -> Canned {
    Canned {
        status,
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        body: body.into(),
    }
}

async fn limited(
    fake: &Arc<Fake>,
    policy: RetryPolicy,
    responses: Vec<Canned>,
) -> (Result<Permission, Error>, Duration) {
    fake.grant("ada", "admin", "admin");
    fake.world().canned.extend(responses);
    let gh = GitHub::new(
        Auth::Token("ghp_test_token".into()),
        GitHubOptions {
            retry: policy,
            ..options(fake)
        },
    )
    .unwrap();
    let start = tokio::time::Instant::now();
    let r = gh.permission(&repo(), "ada").await;
    (r, start.elapsed())
}

// These run on tokio's paused clock (`start_paused`): the client sleeps with
// `tokio::time::sleep`, so a wait of minutes passes at once and the virtual time that went by
// is exactly what the client waited. The fake answers on loopback in the same runtime.

/// Virtual time waited, within a second of `expected` (the loopback round trips take none).
fn assert_waited(waited: Duration, expected: Duration) {
    assert!(
        waited >= expected && waited < expected + Duration::from_secs(1),
        "waited {waited:?}, expected {expected:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_waited_out() {
    let fake = Fake::start("").await;
    let (r, waited) = limited(
        &fake,
        RetryPolicy::default(),
        vec![canned(429, &[("retry-after", "7".into())], "{}")],
    )
    .await;
    assert_eq!(r.unwrap(), Permission::Admin);
    assert_waited(waited, Duration::from_secs(7));
    assert_eq!(fake.requests("GET", "/permission").len(), 2);
    // A secondary limit that says how long to wait is waited exactly that long, not a minute.
    let (r, waited) = limited(
        &fake,
        RetryPolicy::default(),
        vec![canned(
            403,
            &[("retry-after", "2".into())],
            r#"{"message":"You have exceeded a secondary rate limit"}"#,
        )],
    )
    .await;
    assert_eq!(r.unwrap(), Permission::Admin);
    assert_waited(waited, Duration::from_secs(2));
    fake.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn exhausted_quota_waits_until_reset() {
    let fake = Fake::start("").await;
    // The reset is wall-clock epoch seconds; the client waits until one second past it.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let reset = now + 1800;
    let (r, waited) = limited(
        &fake,
        RetryPolicy {
            max_wait: Duration::from_secs(3600),
            ..RetryPolicy::default()
        },
        vec![canned(
            403,
            &[
                ("x-ratelimit-remaining", "0".into()),
                ("x-ratelimit-reset", reset.to_string()),
            ],
            r#"{"message":"API rate limit exceeded"}"#,
        )],
    )
    .await;
    assert_eq!(r.unwrap(), Permission::Admin);
    // Between the two clock readings at most a second of wall time passes.
    assert!(
        waited >= Duration::from_secs(1800) && waited <= Duration::from_secs(1802),
        "{waited:?}"
    );
    assert_eq!(fake.requests("GET", "/permission").len(), 2);
    fake.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn secondary_limit_waits_a_minute_then_backs_off_exponentially() {
    let fake = Fake::start("").await;
    let body = r#"{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}"#;
    let (r, waited) = limited(
        &fake,
        RetryPolicy::default(),
        vec![
            canned(403, &[], body),
            canned(403, &[], body),
            canned(429, &[], body),
        ],
    )
    .await;
    assert_eq!(r.unwrap(), Permission::Admin);
    // 60 s, then 120 s, then 240 s.
    assert_waited(waited, Duration::from_secs(60 + 120 + 240));
    assert_eq!(fake.requests("GET", "/permission").len(), 4);
    fake.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn rate_limit_retries_are_bounded() {
    let fake = Fake::start("").await;
    // Limited on every attempt: the default policy makes 6 requests, waits 5 times, stops.
    let always: Vec<Canned> = (0..20)
        .map(|_| canned(429, &[("retry-after", "3".into())], "{}"))
        .collect();
    let (r, waited) = limited(&fake, RetryPolicy::default(), always).await;
    assert!(
        matches!(r, Err(Error::RateLimited { attempts: 6, .. })),
        "{r:?}"
    );
    assert_eq!(fake.requests("GET", "/permission").len(), 6);
    assert_waited(waited, Duration::from_secs(5 * 3));
    fake.world().canned.clear();
    // Secondary back-off doubles up to the longest allowed wait, then gives up rather than
    // sleeping past it: 60 + 120 + 240 + 480 = 900 s, and 960 s would exceed a 15-minute cap.
    let body = r#"{"message":"You have exceeded a secondary rate limit."}"#;
    let (r, waited) = limited(
        &fake,
        RetryPolicy {
            max_attempts: 10,
            max_wait: Duration::from_secs(15 * 60),
            ..RetryPolicy::default()
        },
        (0..10).map(|_| canned(403, &[], body)).collect(),
    )
    .await;
    assert!(matches!(r, Err(Error::RateLimited { .. })), "{r:?}");
    assert_waited(waited, Duration::from_secs(60 + 120 + 240 + 480));
    fake.world().canned.clear();
    // Asked to wait a day: give up at once instead.
    let (r, waited) = limited(
        &fake,
        RetryPolicy::default(),
        vec![canned(429, &[("retry-after", "86400".into())], "{}")],
    )
    .await;
    assert!(matches!(r, Err(Error::RateLimited { .. })), "{r:?}");
    assert!(
        waited < Duration::from_secs(1),
        "gave up at once: {waited:?}"
    );
}
