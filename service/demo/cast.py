"""The fixed cast of the demo: workspaces, instances, workflow templates, n8n node types,
models with their OpenRouter reference prices, and the error texts n8n really produces.

Everything here is static data; workspace_records.py and execution_records.py turn it into
records with times relative to `now`. Names are chosen to exercise what users meet in
practice: several time zones (one with a +05:45 offset, two with DST on opposite
hemispheres), a workspace name longer than the 200 code-point output bound, astral
characters, a workflow name past both the 100 (execution label) and 200 (workflow name)
code-point bounds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

DEMO_EMAIL = "demo@elova.dev"
DEMO_PASSWORD = "demo-password-change-me"
OTHER_EMAIL = "controller@globex-finance.example"
OTHER_PASSWORD = "other-password-change-me"

# (type, typeVersion) of the n8n nodes the templates use; typeVersion None is how n8n
# reports a community node whose package is not installed on the instance any more.
NodeType = tuple[str, float | int | None]
WEBHOOK: NodeType = ("n8n-nodes-base.webhook", 2)
SCHEDULE: NodeType = ("n8n-nodes-base.scheduleTrigger", 1.2)
MANUAL: NodeType = ("n8n-nodes-base.manualTrigger", 1)
HTTP: NodeType = ("n8n-nodes-base.httpRequest", 4.2)
IF: NodeType = ("n8n-nodes-base.if", 2.2)
SWITCH: NodeType = ("n8n-nodes-base.switch", 3.2)
SET: NodeType = ("n8n-nodes-base.set", 3.4)
CODE: NodeType = ("n8n-nodes-base.code", 2)
POSTGRES: NodeType = ("n8n-nodes-base.postgres", 2.5)
SLACK: NodeType = ("n8n-nodes-base.slack", 2.3)
GMAIL: NodeType = ("n8n-nodes-base.gmail", 2.1)
GMAIL_TRIGGER: NodeType = ("n8n-nodes-base.gmailTrigger", 1.2)
SHEETS: NodeType = ("n8n-nodes-base.googleSheets", 4.5)
EMAIL: NodeType = ("n8n-nodes-base.emailSend", 2.1)
BATCHES: NodeType = ("n8n-nodes-base.splitInBatches", 3)
MERGE: NodeType = ("n8n-nodes-base.merge", 3)
NOOP: NodeType = ("n8n-nodes-base.noOp", 1)
ERROR_TRIGGER: NodeType = ("n8n-nodes-base.errorTrigger", 1)
HUBSPOT: NodeType = ("n8n-nodes-base.hubspot", 2.1)
SHOPIFY_TRIGGER: NodeType = ("n8n-nodes-base.shopifyTrigger", 1)
TELEGRAM_TRIGGER: NodeType = ("n8n-nodes-base.telegramTrigger", 1.1)
TELEGRAM: NodeType = ("n8n-nodes-base.telegram", 1.2)
ZENDESK: NodeType = ("n8n-nodes-base.zendesk", 1)
NOTION: NodeType = ("n8n-nodes-base.notion", 2.2)
AIRTABLE: NodeType = ("n8n-nodes-base.airtable", 2.1)
GITHUB: NodeType = ("n8n-nodes-base.github", 1)
DRIVE_TRIGGER: NodeType = ("n8n-nodes-base.googleDriveTrigger", 1)
RESPOND: NodeType = ("n8n-nodes-base.respondToWebhook", 1.1)
STICKY: NodeType = ("n8n-nodes-base.stickyNote", 1)
WAIT: NodeType = ("n8n-nodes-base.wait", 1.1)
XERO: NodeType = ("n8n-nodes-base.xero", 1)
STRIPE: NodeType = ("n8n-nodes-base.stripe", 1)
JIRA: NodeType = ("n8n-nodes-base.jira", 1)
PUPPETEER: NodeType = ("n8n-nodes-puppeteer.puppeteer", None)
AGENT: NodeType = ("@n8n/n8n-nodes-langchain.agent", 1.7)
OPENAI_CHAT: NodeType = ("@n8n/n8n-nodes-langchain.lmChatOpenAi", 1.2)
ANTHROPIC_CHAT: NodeType = ("@n8n/n8n-nodes-langchain.lmChatAnthropic", 1.3)
OPENROUTER_CHAT: NodeType = ("@n8n/n8n-nodes-langchain.lmChatOpenRouter", 1)
MISTRAL_CHAT: NodeType = ("@n8n/n8n-nodes-langchain.lmChatMistralCloud", 1)
MEMORY: NodeType = ("@n8n/n8n-nodes-langchain.memoryBufferWindow", 1.3)
SUMMARIZE: NodeType = ("@n8n/n8n-nodes-langchain.chainSummarization", 2)
LLM_CHAIN: NodeType = ("@n8n/n8n-nodes-langchain.chainLlm", 1.5)
EMBED_OPENAI: NodeType = ("@n8n/n8n-nodes-langchain.embeddingsOpenAi", 1.2)
PINECONE: NodeType = ("@n8n/n8n-nodes-langchain.vectorStorePinecone", 1)
LOADER: NodeType = ("@n8n/n8n-nodes-langchain.documentDefaultDataLoader", 1)
SPLITTER: NodeType = ("@n8n/n8n-nodes-langchain.textSplitterRecursiveCharacterTextSplitter", 1)
HTTP_TOOL: NodeType = ("@n8n/n8n-nodes-langchain.toolHttpRequest", 1.1)
PARSER: NodeType = ("@n8n/n8n-nodes-langchain.outputParserStructured", 1.2)

CHAT_MODEL_TYPES = frozenset(
    t[0] for t in (OPENAI_CHAT, ANTHROPIC_CHAT, OPENROUTER_CHAT, MISTRAL_CHAT, EMBED_OPENAI)
)
TRIGGER_TYPES = frozenset(
    t[0]
    for t in (
        WEBHOOK,
        SCHEDULE,
        MANUAL,
        ERROR_TRIGGER,
        SHOPIFY_TRIGGER,
        TELEGRAM_TRIGGER,
        GMAIL_TRIGGER,
        DRIVE_TRIGGER,
    )
)


@dataclass(frozen=True)
class Model:
    """A model as n8n reports it, with its OpenRouter reference price per million tokens.

    `input_price` None: OpenRouter has no reference mapping for it (a missing mapping).
    """

    name: str
    provider: str
    input_price: Decimal | None
    output_price: Decimal | None
    cached_price: Decimal | None = None
    reasoning: bool = False


MODELS = {
    "gpt-4o-mini": Model(
        "gpt-4o-mini-2024-07-18", "openai", Decimal("0.15"), Decimal("0.6"), Decimal("0.075")
    ),
    "gpt-4o": Model("gpt-4o-2024-08-06", "openai", Decimal("2.5"), Decimal("10"), Decimal("1.25")),
    "o3-mini": Model(
        "o3-mini-2025-01-31",
        "openai",
        Decimal("1.1"),
        Decimal("4.4"),
        Decimal("0.55"),
        reasoning=True,
    ),
    "claude-sonnet": Model(
        "claude-3-5-sonnet-20241022", "anthropic", Decimal("3"), Decimal("15"), Decimal("0.3")
    ),
    "claude-haiku": Model(
        "claude-3-5-haiku-20241022", "anthropic", Decimal("0.8"), Decimal("4"), Decimal("0.08")
    ),
    "embedding": Model("text-embedding-3-small", "openai", Decimal("0.02"), Decimal("0")),
    "mistral": Model("mistral-small-latest", "mistral", None, None),
}

# Node type → (error name, message) pairs n8n stores for that kind of node.
ERRORS: dict[str, tuple[tuple[str | None, str], ...]] = {
    HTTP[0]: (
        ("NodeApiError", "The service was not able to process your request — 502 Bad Gateway"),
        ("NodeApiError", "The service is receiving too many requests from you (429)"),
        ("NodeApiError", "connect ETIMEDOUT 10.0.3.17:443"),
        ("NodeApiError", "Authorization failed - please check your credentials (401)"),
    ),
    SLACK[0]: (("NodeApiError", "channel_not_found"), ("NodeApiError", "not_in_channel")),
    POSTGRES[0]: (
        ("NodeOperationError", 'duplicate key value violates unique constraint "orders_pkey"'),
        (
            "NodeOperationError",
            "remaining connection slots are reserved for non-replication superuser connections",
        ),
    ),
    CODE[0]: (
        ("TypeError", "Cannot read properties of undefined (reading 'email') [line 4]"),
        ("ReferenceError", "lineItems is not defined [line 12]"),
    ),
    OPENAI_CHAT[0]: (
        (
            "NodeApiError",
            "Rate limit reached for gpt-4o-mini in organization org-3kQ… on tokens "
            "per min (TPM): Limit 200000, Used 199321, Requested 1473.",
        ),
        (
            "NodeApiError",
            "This model's maximum context length is 128000 tokens. However, your "
            "messages resulted in 131207 tokens.",
        ),
    ),
    ANTHROPIC_CHAT[0]: (("NodeApiError", "Overloaded (529)"),),
    AGENT[0]: (
        ("NodeOperationError", "Agent stopped due to max iterations."),
        ("NodeOperationError", "Model output doesn't fit required format"),
    ),
    GMAIL[0]: (("NodeApiError", "Invalid To header: jane.doe@@example.com"),),
    SHEETS[0]: (("NodeApiError", "The caller does not have permission (403)"),),
    HUBSPOT[0]: (("NodeApiError", "Contact already exists. Existing ID: 51701"),),
    XERO[0]: (
        (
            "NodeApiError",
            "A validation exception occurred: Invoice not of valid status for modification",
        ),
    ),
    ZENDESK[0]: (("NodeApiError", "RecordNotFound: Not found"),),
    PUPPETEER[0]: (("Error", "Navigation timeout of 30000 ms exceeded"),),
}
GENERIC_ERROR = ("NodeOperationError", "Unknown error")
CRASH_ERRORS = (
    ("Error", "Worker process exited unexpectedly (code 137: out of memory)"),
    (None, "Execution stopped at this node: n8n may have run out of memory while running it."),
)


@dataclass(frozen=True)
class Template:
    """A workflow as it lives in n8n: nodes, how it is started, how often, how it fails.

    `schedule_hour` set: runs once a day at that local hour; otherwise `per_day` executions
    arrive at random, weighted to local working hours. `model` names the chat model of AI
    workflows (the key in MODELS), whose usage is priced.
    """

    name: str
    nodes: tuple[tuple[str, NodeType], ...]
    per_day: float = 0.0
    schedule_hour: int | None = None
    failure_rate: float = 0.04
    model: str | None = None
    calls: tuple[int, int] = (1, 1)  # model calls per execution (min, max)
    median_ms: int = 1200
    disabled: tuple[str, ...] = ()  # node names disabled in the editor
    waits: bool = False  # has a Wait node: some executions are `waiting`


def _t(name: str, *nodes: tuple[str, NodeType], **kw: object) -> Template:
    return Template(name, tuple(nodes), **kw)  # type: ignore[arg-type]


TEMPLATES: dict[str, Template] = {
    "orders": _t(
        "Process Shopify orders",
        ("Shopify Trigger", SHOPIFY_TRIGGER),
        ("Normalize order", SET),
        ("Is B2B?", IF),
        ("Create invoice in Xero", XERO),
        ("Save order", POSTGRES),
        ("Notify #orders", SLACK),
        ("Debug: dump payload", CODE),
        per_day=18,
        failure_rate=0.05,
        median_ms=2400,
        disabled=("Debug: dump payload",),
    ),
    "daily_report": _t(
        "Daily sales report",
        ("Every morning", SCHEDULE),
        ("Query yesterday's sales", POSTGRES),
        ("Build summary", CODE),
        ("Append to sheet", SHEETS),
        ("Email leadership", EMAIL),
        ("Sticky Note", STICKY),
        schedule_hour=7,
        failure_rate=0.03,
        median_ms=5200,
    ),
    "error_handler": _t(
        "Error handler → Slack",
        ("Error Trigger", ERROR_TRIGGER),
        ("Format alert", SET),
        ("Post to #n8n-alerts", SLACK),
        per_day=1.5,
        failure_rate=0.01,
        median_ms=600,
    ),
    "support_triage": _t(
        "AI support triage",
        ("Gmail Trigger", GMAIL_TRIGGER),
        ("Classify ticket", AGENT),
        ("OpenAI Chat Model", OPENAI_CHAT),
        ("Window Buffer Memory", MEMORY),
        ("Route by category", SWITCH),
        ("Create Zendesk ticket", ZENDESK),
        ("Draft reply", GMAIL),
        ("Structured Output Parser", PARSER),
        per_day=14,
        failure_rate=0.06,
        model="gpt-4o-mini",
        calls=(1, 4),
        median_ms=6800,
    ),
    "lead_enrich": _t(
        "Batch enrich new HubSpot leads",
        ("Every 2 hours", SCHEDULE),
        ("Get new contacts", HUBSPOT),
        ("Loop over leads", BATCHES),
        ("Clearbit lookup", HTTP),
        ("Update contact", HUBSPOT),
        ("Wait 1s (rate limit)", WAIT),
        per_day=6,
        failure_rate=0.07,
        median_ms=48000,
    ),
    "erp_mega": _t(
        "ERP master data sync (generated — do not edit by hand)",
        ("Nightly", SCHEDULE),
        schedule_hour=2,
        failure_rate=0.08,
        median_ms=95000,
    ),
    "email_reply": _t(
        "Draft customer email replies with Claude",
        ("Webhook", WEBHOOK),
        ("Fetch ticket thread", ZENDESK),
        ("Write reply", LLM_CHAIN),
        ("Anthropic Chat Model", ANTHROPIC_CHAT),
        ("Post internal note", ZENDESK),
        ("Respond to Webhook", RESPOND),
        per_day=11,
        failure_rate=0.04,
        model="claude-sonnet",
        median_ms=9100,
    ),
    "telegram_bot": _t(
        "Telegram order-status bot",
        ("Telegram Trigger", TELEGRAM_TRIGGER),
        ("Order status agent", AGENT),
        ("OpenRouter Chat Model", OPENROUTER_CHAT),
        ("Lookup order (HTTP tool)", HTTP_TOOL),
        ("Chat memory", MEMORY),
        ("Send reply", TELEGRAM),
        per_day=16,
        failure_rate=0.05,
        model="gpt-4o",
        calls=(1, 3),
        median_ms=4300,
    ),
    "ticket_summary": _t(
        "Summarize weekly tickets",
        ("Monday 8am", SCHEDULE),
        ("Get solved tickets", ZENDESK),
        ("Summarization Chain", SUMMARIZE),
        ("Anthropic Chat Model", ANTHROPIC_CHAT),
        ("Post to Notion", NOTION),
        schedule_hour=8,
        failure_rate=0.05,
        model="claude-haiku",
        calls=(3, 9),
        median_ms=31000,
    ),
    "zendesk_sync": _t(
        "Zendesk → Airtable sync",
        ("Every 15 minutes", SCHEDULE),
        ("Get updated tickets", ZENDESK),
        ("Map fields", SET),
        ("Upsert rows", AIRTABLE),
        per_day=22,
        failure_rate=0.02,
        median_ms=1800,
    ),
    "rag_ingest": _t(
        "RAG: ingest brand docs into Pinecone",
        ("Google Drive Trigger", DRIVE_TRIGGER),
        ("Download file", HTTP),
        ("Default Data Loader", LOADER),
        ("Recursive Character Text Splitter", SPLITTER),
        ("Embeddings OpenAI", EMBED_OPENAI),
        ("Pinecone Vector Store", PINECONE),
        per_day=3,
        failure_rate=0.06,
        model="embedding",
        calls=(2, 12),
        median_ms=14000,
    ),
    "social_posts": _t(
        "Schedule social posts from Airtable",
        ("Every hour", SCHEDULE),
        ("Get approved posts", AIRTABLE),
        ("Screenshot landing page", PUPPETEER),
        ("Write caption", LLM_CHAIN),
        ("Mistral Chat Model", MISTRAL_CHAT),
        ("Mark as posted", AIRTABLE),
        per_day=8,
        failure_rate=0.09,
        model="mistral",
        median_ms=7400,
    ),
    "github_labeler": _t(
        "GitHub issue labeler (o3-mini)",
        ("Webhook", WEBHOOK),
        ("Classify issue", AGENT),
        ("OpenAI Chat Model", OPENAI_CHAT),
        ("Add labels", GITHUB),
        per_day=5,
        failure_rate=0.04,
        model="o3-mini",
        calls=(1, 2),
        median_ms=11000,
    ),
    "finance_recon": _t(
        "Weekly finance reconciliation: pull Stripe payouts, match them against Xero invoices, "
        "flag mismatches over €50, post a summary to #finance-ops, open Jira tickets for "
        "unmatched items and archive the CSV exports to Google Drive (owner: M. Schneider — "
        "please do not rename without telling finance)",
        ("Monday 6am", SCHEDULE),
        ("Stripe payouts", STRIPE),
        ("Xero invoices", XERO),
        ("Match", MERGE),
        ("Mismatch > €50?", IF),
        ("Open Jira ticket", JIRA),
        ("Post summary", SLACK),
        schedule_hour=6,
        failure_rate=0.1,
        median_ms=22000,
    ),
    "kathmandu_etl": _t(
        "सेन्सर डाटा ETL (Kathmandu sensors)",
        ("Every 30 minutes", SCHEDULE),
        ("Fetch sensor batch", HTTP),
        ("Clean readings", CODE),
        ("Insert readings", POSTGRES),
        ("Alert on gaps", IF),
        ("Notify on-call", SLACK),
        per_day=30,
        failure_rate=0.03,
        median_ms=3100,
    ),
    "prototype_agent": _t(
        "🧪 Prototype: research agent 🤖",
        ("When clicking ‘Test workflow’", MANUAL),
        ("Research agent", AGENT),
        ("OpenAI Chat Model", OPENAI_CHAT),
        ("Web search (HTTP tool)", HTTP_TOOL),
        ("Save notes", NOTION),
        per_day=2.5,
        failure_rate=0.15,
        model="gpt-4o",
        calls=(2, 6),
        median_ms=25000,
    ),
    "globex_payables": _t(
        "Accounts payable approvals",
        ("Webhook", WEBHOOK),
        ("Lookup vendor", POSTGRES),
        ("Needs approval?", IF),
        ("Ask approver", SLACK),
        ("Wait for approval", WAIT),
        ("Book in Xero", XERO),
        per_day=9,
        failure_rate=0.04,
        median_ms=2000,
        waits=True,
    ),
    "onboarding": _t(
        "Customer onboarding sequence",
        ("Webhook", WEBHOOK),
        ("Create CRM deal", HUBSPOT),
        ("Send welcome email", GMAIL),
        ("Wait 3 days", WAIT),
        ("Send check-in email", GMAIL),
        per_day=4,
        failure_rate=0.03,
        median_ms=1500,
        waits=True,
    ),
    # Historical workflows: archived, absent from n8n, or with their definition removed.
    "black_friday": _t(
        "Black Friday 2025 discount codes",
        ("Webhook", WEBHOOK),
        ("Generate code", CODE),
        ("Email code", GMAIL),
        per_day=20,
        failure_rate=0.05,
        median_ms=900,
    ),
    "zapier_bridge": _t(
        "Legacy Zapier bridge",
        ("Webhook", WEBHOOK),
        ("Forward", HTTP),
        per_day=6,
        failure_rate=0.12,
        median_ms=700,
    ),
    "pii_export": _t(
        "Customer PII export (removed after GDPR review)",
        ("Manual", MANUAL),
        ("Export customers", POSTGRES),
        ("Write CSV", CODE),
        per_day=0.4,
        failure_rate=0.1,
        median_ms=12000,
    ),
}


@dataclass(frozen=True)
class WorkflowPlan:
    """One workflow on one instance. `lifecycle`: current, archived, absent, removed."""

    template: str
    lifecycle: str = "current"
    active: bool = True
    tracked: bool = True
    days: int = 120  # how far back its executions go
    ended_days_ago: int = 0  # historical workflows stopped running this many days ago


@dataclass(frozen=True)
class InstancePlan:
    name: str
    status: str  # pending, connected, error
    workflows: tuple[WorkflowPlan, ...] = ()
    jobs: int = 20
    error_code: str | None = None  # the N8N_* code of its failing syncs
    history_complete: bool = True
    inventory_truncated: bool = False
    auto_sync: bool = True
    interval_minutes: int = 60
    orphans: int = 0  # executions of workflows that were never retained (workflowId null)
    undated: int = 0


@dataclass(frozen=True)
class WorkspacePlan:
    key: str
    name: str
    zone: str
    demo_role: str | None
    other_role: str | None
    instances: tuple[InstancePlan, ...] = field(default_factory=tuple)
    poll_seconds: int = 300


W = WorkflowPlan
LONG_WORKSPACE_NAME = (
    "Harbour Bridge Marketing — Asia-Pacific Growth, Partnerships, Lifecycle Email, Paid "
    "Social, Community Events and Brand Experiments (Sydney, Melbourne, Brisbane, Perth & "
    "Auckland) — shared automation workspace for agency contractors and the in-house team"
)

WORKSPACES: tuple[WorkspacePlan, ...] = (
    WorkspacePlan(
        "acme",
        "Acme Logistics",
        "Europe/Berlin",
        "owner",
        "member",
        (
            InstancePlan(
                "Production n8n",
                "connected",
                jobs=140,
                interval_minutes=30,
                orphans=40,
                undated=12,
                workflows=(
                    W("orders"),
                    W("daily_report"),
                    W("error_handler"),
                    W("support_triage"),
                    W("lead_enrich"),
                    W("erp_mega"),
                    W("finance_recon"),
                    W("onboarding", active=False, days=40),
                    W("black_friday", "archived", active=False, days=75, ended_days_ago=58),
                    W("zapier_bridge", "absent", active=False, ended_days_ago=35),
                    W("pii_export", "removed", active=False, ended_days_ago=44),
                ),
            ),
            InstancePlan(
                "Staging n8n",
                "error",
                jobs=30,
                error_code="N8N_AUTH_FAILED",
                workflows=(
                    W("orders", days=60),
                    W("support_triage", active=False, days=30, tracked=False),
                ),
            ),
        ),
    ),
    WorkspacePlan(
        "northwind",
        "Northwind Customer Care",
        "America/New_York",
        "admin",
        None,
        (
            InstancePlan(
                "n8n Cloud (support)",
                "connected",
                jobs=45,
                history_complete=False,
                interval_minutes=15,
                undated=4,
                workflows=(
                    W("email_reply"),
                    W("telegram_bot"),
                    W("ticket_summary"),
                    W("zendesk_sync"),
                    W("error_handler", days=90),
                ),
            ),
        ),
    ),
    WorkspacePlan(
        "kathmandu",
        "Himalaya Data Lab",
        "Asia/Kathmandu",
        "member",
        None,
        (
            InstancePlan(
                "Self-hosted n8n (Docker)",
                "connected",
                jobs=36,
                inventory_truncated=True,
                interval_minutes=120,
                workflows=(
                    W("kathmandu_etl"),
                    W("github_labeler", days=75),
                    W("daily_report", days=100),
                ),
            ),
            InstancePlan("New EU instance", "pending", jobs=1, history_complete=False),
        ),
        poll_seconds=900,
    ),
    WorkspacePlan(
        "harbour",
        LONG_WORKSPACE_NAME,
        "Australia/Sydney",
        "owner",
        None,
        (
            InstancePlan(
                "Marketing n8n",
                "connected",
                jobs=24,
                interval_minutes=60,
                workflows=(W("rag_ingest"), W("social_posts"), W("onboarding", days=80)),
            ),
        ),
    ),
    WorkspacePlan(
        "launchpad",
        "🚀 Launchpad 𝔸𝕀 Lab 🧪",
        "Asia/Tokyo",
        "admin",
        None,
        (
            InstancePlan(
                "Prototype n8n 🛠️",
                "error",
                jobs=18,
                error_code="N8N_TARGET_BLOCKED",
                auto_sync=False,
                interval_minutes=1440,
                workflows=(W("prototype_agent", days=50),),
            ),
        ),
    ),
    WorkspacePlan(
        "globex",
        "Globex Finance",
        "America/Chicago",
        None,
        "owner",
        (
            InstancePlan(
                "Finance n8n",
                "connected",
                jobs=20,
                workflows=(W("globex_payables"), W("error_handler", days=60)),
            ),
        ),
    ),
)
