"""The operational properties template.yaml must keep (docs/DEPLOY.md), asserted one by one.

    python infra/check_template.py template.yaml samconfig.toml

Run by infra/lint-template with the deploy venv's Python (samtranslator reads CloudFormation's
short tags: !Ref, !Sub, !GetAtt ...). Prints every property that does not hold and exits 1.
"""
import json
import os
import re
import sys

from samtranslator.yaml_helper import yaml_parse

# Per function instance, at most DB_POOL_SIZE connections; across every Postgres function, at
# most this many (docs/DEPLOY.md, "Concurrency and connections": the proxy's budget for the
# functions on the smallest instance class it recommends).
PROXY_CONNECTION_BUDGET = 100
# S3 read speed the skin-ingest timeouts are sized for, bytes per second (a conservative
# figure for one GET inside a region) and the copy within S3 after it.
S3_BYTES_PER_SECOND = 10 * 1024 * 1024
SINGLETONS = ["MigrateFunction", "JanitorFunction", "AdminFunction"]
# skin-ingest inflates up to 256 MiB per upload: at most this many run at once, so a flood of
# uploads (or of events) waits in S3's async-invoke queue instead of multiplying the work.
MAX_INGEST_CONCURRENCY = 10
# SQS's longest DelaySeconds, the longest a wake of outbox-dispatcher waits (core ports/wake.rs
# MAX_WAKE_DELAY).
MAX_WAKE_DELAY = 900
# The functions that queue callbacks or sweep them, so may wake outbox-dispatcher (core
# callbacks::wake_dispatcher and wake_after_sweep): admission, worker reports, the janitor.
WAKE_SENDERS = ("RenderFunction", "JobWebhookFunction", "JanitorFunction", "OutboxDispatcherFunction")
# The functions that release queued jobs to the farm and publish their render events at once
# (core outbox::release_to_farm; docs/DESIGN.md "Fair service"): after an admission, a worker's
# report that ends a job, a janitor run that ended some, and in every sweep.
RELEASERS = ("RenderFunction", "JobWebhookFunction", "JanitorFunction", "OutboxDispatcherFunction")
# The farm's settings, each from its parameter in the Globals (support/config/capacity.rs).
FARM_SETTINGS = {"RENDER_SLOTS": "RenderSlots", "RELEASE_AHEAD": "ReleaseAhead",
                 "RENDER_OVERHEAD_SECS": "RenderOverheadSecs", "RENDER_SPEED": "RenderSpeed",
                 "ANONYMOUS_WEIGHT": "AnonymousWeight", "MAX_QUEUE_WAIT": "MaxQueueWait"}
# A route's service time per instance on AWS, ms, when docs/PERFORMANCE.md's "Gateway
# throttles" table does not measure it (a 100 ms request).
UNMEASURED_MS = 100.0


def service_times(performance_md):
    """docs/PERFORMANCE.md's "Gateway throttles" table: {(METHOD, path): ms with the AWS allowance}
    (a route measured in several answers counts its slowest)."""
    text = open(performance_md).read().partition("## Gateway throttles")[2].partition("\n## ")[0]
    times = {}
    for m in re.finditer(r"^\| `([A-Z]+) (/[^`]*)`[^|]*\| [\d.]+ \| ([\d.]+) \|", text, re.M):
        key = (m.group(1), m.group(2))
        times[key] = max(times.get(key, 0.0), float(m.group(3)))
    return times

# The repository (this file's parent's parent): what the template is checked against is read
# from there, wherever the template checked is (infra/lint-template checks mutants in /tmp).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)


def ref(value):
    """The name a `!Ref` points at, else None."""
    return value.get("Ref") if isinstance(value, dict) else None


def default_of(template, value):
    """A literal, or the default of the parameter it references."""
    name = ref(value)
    if name is None:
        return value
    return template["Parameters"].get(name, {}).get("Default")


def statements(fn):
    """A function's policy statements (its inline Statement lists)."""
    return [
        st for policy in fn["Properties"].get("Policies", []) if isinstance(policy, dict)
        for st in policy.get("Statement", [])
    ]


def listed(value):
    return value if isinstance(value, list) else [value]


def check_live_events(template, resources, functions, params, watches):
    """Live events (docs/DESIGN.md §11, docs/DEPLOY.md "Live events"): one WebSocket API whose
    every route reaches the events function, which only this API may invoke; the connection
    table with its keys and TTL; the Management API rights on this API's connections only, for
    the two functions that post frames; each function's DynamoDB rights on its tables only; the
    URLs the functions are told; the alarms; the output."""
    apis = [n for n, r in resources.items()
            if r["Type"] == "AWS::ApiGatewayV2::Api" and r["Properties"].get("ProtocolType") == "WEBSOCKET"]
    check(apis == ["EventsApi"], f"one WebSocket API, EventsApi (found {apis})")
    api = resources.get("EventsApi", {}).get("Properties", {})
    check(api.get("RouteSelectionExpression") == "$request.body.action",
          "EventsApi: routes selected by $request.body.action")
    events = functions.get("EventsFunction", {})
    check(events.get("Metadata", {}).get("BuildProperties", {}).get("Binary") == "events"
          and events.get("Metadata", {}).get("BuildMethod") == "rust-cargolambda",
          "EventsFunction: builds the events binary (rust-cargolambda)")
    target_uri = ("arn:${AWS::Partition}:apigateway:${AWS::Region}:lambda:path/2015-03-31/functions/"
                  "${EventsFunction.Arn}/invocations")
    integrations = {n for n, r in resources.items()
                    if r["Type"] == "AWS::ApiGatewayV2::Integration"
                    and ref(r["Properties"].get("ApiId")) == "EventsApi"
                    and r["Properties"].get("IntegrationType") == "AWS_PROXY"
                    and r["Properties"].get("IntegrationUri") == {"Fn::Sub": target_uri}}
    check(integrations, "EventsApi: an AWS_PROXY integration with EventsFunction")
    routes = {}
    for n, r in resources.items():
        if r["Type"] == "AWS::ApiGatewayV2::Route" and ref(r["Properties"].get("ApiId")) == "EventsApi":
            routes[r["Properties"].get("RouteKey")] = r["Properties"]
    for key in ("$connect", "$disconnect", "subscribe", "unsubscribe", "$default"):
        route = routes.get(key)
        check(route is not None, f"EventsApi: no {key} route")
        if route is None:
            continue
        target = route.get("Target", {})
        target = target.get("Fn::Sub", "") if isinstance(target, dict) else target
        check(any(target == f"integrations/${{{i}}}" for i in integrations),
              f"EventsApi: the {key} route integrates with EventsFunction")
        check(route.get("AuthorizationType", "NONE") == "NONE",
              f"EventsApi: {key} has no authorizer (the function checks X-Origin-Secret at $connect)")
    check(set(routes) == {"$connect", "$disconnect", "subscribe", "unsubscribe", "$default"},
          f"EventsApi: exactly the five routes, found {sorted(routes)}")
    stages = [r["Properties"] for r in resources.values()
              if r["Type"] == "AWS::ApiGatewayV2::Stage" and ref(r["Properties"].get("ApiId")) == "EventsApi"]
    check(len(stages) == 1, "EventsApi: one stage")
    reserved = int(default_of(template, events.get("Properties", {}).get("ReservedConcurrentExecutions")) or 0)
    for stage in stages[:1]:
        check(stage.get("AutoDeploy") is True, "EventsStage: AutoDeploy")
        check(ref(stage.get("StageName")) == "Stage", "EventsStage: named after Stage")
        throttle = stage.get("DefaultRouteSettings", {})
        rate, burst = throttle.get("ThrottlingRateLimit"), throttle.get("ThrottlingBurstLimit")
        check(isinstance(rate, (int, float)) and isinstance(burst, int) and rate > 0 and burst > 0,
              "EventsStage: a literal route throttle (DefaultRouteSettings rate and burst)")
        if isinstance(rate, (int, float)) and isinstance(burst, int):
            check(burst <= reserved, f"EventsStage: burst {burst} above events' {reserved} reserved instances")
            check(rate * UNMEASURED_MS / 1000 <= reserved,
                  f"EventsStage: rate {rate}/s keeps more than events' {reserved} instances busy at {UNMEASURED_MS:.0f} ms")
        check("DestinationArn" in stage.get("AccessLogSettings", {}), "EventsStage: access logs")
    # Only this API may invoke the function (and nothing else names it as a principal).
    permissions = [r["Properties"] for r in resources.values()
                   if r["Type"] == "AWS::Lambda::Permission" and ref(r["Properties"].get("FunctionName")) == "EventsFunction"]
    expected_source = {"Fn::Sub": "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${EventsApi}/*"}
    check(len(permissions) == 1
          and permissions[0].get("Principal") == "apigateway.amazonaws.com"
          and permissions[0].get("Action") == "lambda:InvokeFunction"
          and permissions[0].get("SourceArn") == expected_source,
          "EventsFunction: one lambda:InvokeFunction permission for apigateway, SourceArn EventsApi's")
    check(not events.get("Properties", {}).get("Events"), "EventsFunction: no SAM event (the WebSocket API's integration only)")
    # The table: on demand, pk S HASH + sk S RANGE, TTL on expires_at.
    table = resources.get("EventsTable", {})
    tp = table.get("Properties", {})
    check(table.get("Type") == "AWS::DynamoDB::Table" and tp.get("BillingMode") == "PAY_PER_REQUEST",
          "EventsTable: a DynamoDB table, on demand")
    check(tp.get("KeySchema") == [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
          and sorted((a["AttributeName"], a["AttributeType"]) for a in tp.get("AttributeDefinitions", []))
          == [("pk", "S"), ("sk", "S")],
          "EventsTable: keys pk (S, HASH) and sk (S, RANGE)")
    check(tp.get("TimeToLiveSpecification") == {"AttributeName": "expires_at", "Enabled": True},
          "EventsTable: TTL on expires_at")
    # The Management API: ManageConnections on this API's connections only, for the two that post.
    connections_arn = {"Fn::Sub": "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${EventsApi}/${Stage}/*/@connections/*"}
    management_url = {"Fn::Sub": "https://${EventsApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}/${Stage}"}
    for name, fn in functions.items():
        manage = [st for st in statements(fn)
                  if any(str(a).startswith("execute-api:") for a in listed(st.get("Action")))]
        env = fn["Properties"].get("Environment", {}).get("Variables", {})
        if name in ("EventsFunction", "OutboxDispatcherFunction"):
            check(len(manage) == 1 and listed(manage[0].get("Action")) == ["execute-api:ManageConnections"]
                  and listed(manage[0].get("Resource")) == [connections_arn],
                  f"{name}: execute-api:ManageConnections on EventsApi's @connections/* only")
            check(env.get("EVENTS_MANAGEMENT_URL") == management_url, f"{name}: EVENTS_MANAGEMENT_URL of EventsApi's stage")
            check(ref(env.get("EVENTS_TABLE")) == "EventsTable", f"{name}: EVENTS_TABLE from EventsTable")
        else:
            check(not manage, f"{name}: no execute-api rights (only events and outbox-dispatcher post frames)")
            check("EVENTS_MANAGEMENT_URL" not in env, f"{name}: no EVENTS_MANAGEMENT_URL")
        # DynamoDB: each function on its own tables only, the events table only for the two.
        tables = set()
        for st in statements(fn):
            if any(str(a).startswith("dynamodb:") for a in listed(st.get("Action"))):
                for item in listed(st.get("Resource")):
                    target = item.get("Fn::GetAtt", [None])[0] if isinstance(item, dict) else None
                    check(target in ("RateLimitTable", "EventsTable"),
                          f"{name}: DynamoDB rights on {item}, not a table of this stack")
                    tables.add(target)
        if name in ("EventsFunction", "OutboxDispatcherFunction"):
            check("EventsTable" in tables, f"{name}: DynamoDB rights on EventsTable")
        else:
            check("EventsTable" not in tables, f"{name}: no rights on EventsTable")
    check(functions.get("EventsFunction") is None or
          {t for st in statements(events) if any(str(a).startswith("dynamodb:") for a in listed(st.get("Action")))
           for t in [i.get("Fn::GetAtt", [None])[0] for i in listed(st.get("Resource")) if isinstance(i, dict)]}
          == {"EventsTable", "RateLimitTable"},
          "EventsFunction: DynamoDB rights on EventsTable and RateLimitTable (connect and frame windows) only")
    # links.events: the functions that answer the 202 and job reads are told the URL.
    for name in ("RenderFunction", "JobsFunction"):
        url = functions[name]["Properties"].get("Environment", {}).get("Variables", {}).get("EVENTS_URL")
        text = json.dumps(url)
        check(url is not None and "wss://" in text and ("EventsApi" in text or "EventsDomainName" in text),
              f"{name}: EVENTS_URL, the live events' wss:// URL (links.events)")
    # Alarms: the API's failed invocations, the dispatcher's failed pushes and closed connections.
    check(any(watches("ExecutionError", "AWS/ApiGateway", {"Ref": "EventsApi"})),
          "an alarm on EventsApi's ExecutionError (ApiId, Stage)")
    for metric in ("EventPushesFailed", "EventPushesGone"):
        check(any(watches(metric, "osurender", {"Ref": "OutboxDispatcherFunction"})),
              f"an alarm on osurender {metric} of outbox-dispatcher")
    output = template.get("Outputs", {}).get("EventsUrl", {})
    check("wss://" in json.dumps(output.get("Value")), "Outputs: EventsUrl, the wss:// URL")


def main(template_path, samconfig_path):
    template = yaml_parse(open(template_path).read())
    resources = template["Resources"]
    params = template["Parameters"]
    globals_env = template["Globals"]["Function"]["Environment"]["Variables"]
    functions = {
        name: r for name, r in resources.items() if r["Type"] == "AWS::Serverless::Function"
    }
    check(len(functions) == 12, f"12 functions expected, found {sorted(functions)}")
    # The functions a WebSocket API's integration invokes (the live events' routes).
    websocket = {
        m.group(1)
        for r in resources.values() if r["Type"] == "AWS::ApiGatewayV2::Integration"
        for m in [re.search(r"/functions/\$\{(\w+)\.Arn\}/", json.dumps(r["Properties"].get("IntegrationUri")))]
        if m
    }

    # Reserved concurrency: one instance of the singletons; every Postgres function bounded,
    # and together under the proxy's connection budget.
    for name in SINGLETONS:
        check(
            functions[name]["Properties"].get("ReservedConcurrentExecutions") == 1,
            f"{name}: ReservedConcurrentExecutions must be 1",
        )
    pool = int(default_of(template, globals_env.get("DB_POOL_SIZE")) or 0)
    check(pool >= 1, "Globals: DB_POOL_SIZE must be set (from DbPoolSize)")
    connections = 0
    for name, fn in functions.items():
        props = fn["Properties"]
        if "VpcConfig" not in props:
            continue
        reserved = props.get("ReservedConcurrentExecutions")
        check(reserved is not None, f"{name}: a Postgres function needs ReservedConcurrentExecutions")
        own_pool = props.get("Environment", {}).get("Variables", {}).get("DB_POOL_SIZE")
        connections += int(default_of(template, reserved) or 0) * int(own_pool or pool)
    check(
        0 < connections <= PROXY_CONNECTION_BUDGET,
        f"Postgres functions may open {connections} connections by default; "
        f"the budget is {PROXY_CONNECTION_BUDGET}",
    )

    # migrate answers within a minute: its timeout; CloudFormation's wait is bounded too.
    migrate = functions["MigrateFunction"]["Properties"]
    check(migrate.get("Timeout", 15) <= 60, "MigrateFunction: Timeout must be <= 60 s")
    service_timeout = int(resources["Migration"]["Properties"].get("ServiceTimeout", 3600))
    check(service_timeout <= 600, "Migration: ServiceTimeout must be set, <= 600 s")

    # admin (API keys, docs/DEPLOY.md "API keys"): the osurender-admin binary, invoked by hand
    # only (no event source, so nothing public reaches it), with migrate's database access.
    admin = resources["AdminFunction"]
    admin_props = admin["Properties"]
    check(
        admin.get("Metadata", {}).get("BuildProperties", {}).get("Binary") == "osurender-admin",
        "AdminFunction: builds the osurender-admin binary",
    )
    check(not admin_props.get("Events"), "AdminFunction: no event source (sam remote invoke only)")
    check(
        admin_props.get("VpcConfig") == migrate.get("VpcConfig"),
        "AdminFunction: the database's VPC, as MigrateFunction",
    )
    check(
        ref(admin_props.get("Environment", {}).get("Variables", {}).get("DB_SECRET_ARN"))
        == "DbSecretArn",
        "AdminFunction: DB_SECRET_ARN from DbSecretArn",
    )
    # `skins free` deletes a removed skin's object (usecases/skins/admin.rs), and nothing else.
    admin_s3 = [
        (st.get("Action"), st.get("Resource"))
        for policy in admin_props.get("Policies", []) if isinstance(policy, dict)
        for st in policy.get("Statement", []) if str(st.get("Action", "")).startswith("s3:")
    ]
    check(
        len(admin_s3) == 1 and admin_s3[0][0] == "s3:DeleteObject"
        and str(admin_s3[0][1].get("Fn::Sub", "")).endswith("/skins/*"),
        f"AdminFunction: s3:DeleteObject on skins/* only (skins free), found {admin_s3}",
    )

    # The bucket cannot be stranded by a failed first create.
    bucket = resources["Bucket"]
    check(
        bucket.get("DeletionPolicy") in ("RetainExceptOnCreate", "Delete")
        or "BucketName" not in bucket["Properties"],
        "Bucket: a fixed name needs DeletionPolicy RetainExceptOnCreate (or Delete)",
    )
    # Browser pages: the API's preflights and answers, and the bucket, from one origin, and only
    # when one is named: CORS is off by default, and "*" is refused in prod.
    origin = params.get("BrowserOrigin", {})
    check(origin.get("Default") == "", "BrowserOrigin defaults to empty (CORS off)")
    for value in ["", "*"]:  # "*" is refused in prod by a rule, not by the pattern
        check(re.fullmatch(origin.get("AllowedPattern", ""), value) is not None,
              f"BrowserOrigin allows {value!r}")
    check(
        any(
            rule.get("RuleCondition") == {"Fn::Equals": [{"Ref": "Stage"}, "prod"]}
            and {"Fn::Not": [{"Fn::Equals": [{"Ref": "BrowserOrigin"}, "*"]}]}
            in [a.get("Assert") for a in rule.get("Assertions", [])]
            for rule in template.get("Rules", {}).values()
        ),
        "Rules: BrowserOrigin * refused when Stage is prod",
    )
    cors = bucket["Properties"].get("CorsConfiguration", {}).get("Fn::If", [None, {}, None])
    check(
        cors[0] == "HasBrowserOrigin"
        and any("POST" in rule.get("AllowedMethods", []) for rule in cors[1].get("CorsRules", []))
        and cors[2] == {"Ref": "AWS::NoValue"},
        "Bucket: a CORS rule allowing the browsers' presigned POST, only with a BrowserOrigin",
    )
    allow_origin = resources["Api"]["Properties"].get("Cors", {}).get("AllowOrigin", {})
    check(
        isinstance(allow_origin, dict) and allow_origin.get("Fn::If", [None])[0] == "HasBrowserOrigin",
        "Api: Cors AllowOrigin from BrowserOrigin, only with one",
    )
    check(ref(globals_env.get("CORS_ALLOW_ORIGIN")) == "BrowserOrigin", "Globals: CORS_ALLOW_ORIGIN")

    # A throttle on every route, a safety valve sized from the benchmark (docs/PERFORMANCE.md,
    # "Gateway throttles"): each route's burst within its function's reserved concurrency, and
    # the rates of one function's routes times their service times within its instances.
    times = service_times(os.path.join(ROOT, "docs/PERFORMANCE.md"))
    check(len(times) >= 5, f"docs/PERFORMANCE.md: the Gateway throttles table measures {len(times)} routes")
    throttles = {
        (s.get("ResourcePath"), s.get("HttpMethod")): s
        for s in resources["Api"]["Properties"].get("MethodSettings", [])
    }
    stage_default = throttles.get(("/*", "*"), {})
    stage_rate = int(default_of(template, stage_default.get("ThrottlingRateLimit")) or 0)
    stage_burst = int(default_of(template, stage_default.get("ThrottlingBurstLimit")) or 0)
    check(stage_rate > 0 and stage_burst > 0, "Api: a stage-wide throttle (/*, *)")
    routed = 0
    for name, fn in functions.items():
        props = fn["Properties"]
        routes = [
            e["Properties"] for e in props.get("Events", {}).values() if e.get("Type") == "Api"
        ]
        if not routes:
            continue
        reserved = int(default_of(template, props.get("ReservedConcurrentExecutions")) or 0)
        busy = 0.0
        for route in routes:
            path = "/" + route["Path"].replace("/", "~1")  # MethodSettings escape "/" as ~1
            method = route["Method"].upper()
            setting = throttles.get((path, method))
            check(setting is not None, f"Api: no throttle (MethodSettings) for {method} {route['Path']}")
            if setting is None:
                continue
            routed += 1
            rate = setting.get("ThrottlingRateLimit")
            burst = setting.get("ThrottlingBurstLimit")
            check(isinstance(rate, (int, float)) and isinstance(burst, int) and rate > 0 and burst > 0,
                  f"Api: {method} {route['Path']}: a literal rate and burst above 0")
            if not (isinstance(rate, (int, float)) and isinstance(burst, int)):
                continue
            check(rate <= stage_rate and burst <= stage_burst,
                  f"Api: {method} {route['Path']}: throttle above the stage-wide one")
            check(burst <= reserved,
                  f"Api: {method} {route['Path']}: burst {burst} above {name}'s {reserved} reserved instances")
            busy += rate * times.get((method, route["Path"]), UNMEASURED_MS) / 1000
        check(busy <= reserved,
              f"{name}: its routes' rates keep {busy:.1f} instances busy (docs/PERFORMANCE.md's service "
              f"times), above its {reserved} reserved instances")
    check(routed + 1 == len(throttles), "Api: a throttle for a route no function serves")

    # skin-ingest: a failure destination, timeouts that fit the largest upload, streaming memory.
    ingest = functions["SkinIngestFunction"]["Properties"]
    on_failure = ingest.get("EventInvokeConfig", {}).get("DestinationConfig", {}).get("OnFailure", {})
    check(on_failure.get("Type") == "SQS", "SkinIngestFunction: OnFailure destination must be SQS")
    destination = on_failure.get("Destination", {})
    target = destination.get("Fn::GetAtt", [None])[0] if isinstance(destination, dict) else None
    check(
        resources.get(target, {}).get("Type") == "AWS::SQS::Queue",
        "SkinIngestFunction: OnFailure must name a queue of this template",
    )
    max_upload = int(params["MaxSkinUploadBytes"]["Default"])
    read_seconds = max_upload / S3_BYTES_PER_SECOND
    aws_timeout_ms = int(ingest["Environment"]["Variables"].get("AWS_TIMEOUT_MS", 5000))
    check(
        aws_timeout_ms / 1000 >= 2 * read_seconds,
        f"SkinIngestFunction: AWS_TIMEOUT_MS {aws_timeout_ms} is short for {max_upload} bytes",
    )
    check(
        ingest.get("Timeout", 15) >= 2 * read_seconds + aws_timeout_ms / 1000,
        "SkinIngestFunction: Timeout must cover reading and copying the largest upload",
    )
    check(ingest.get("MemorySize", 128) <= 512, "SkinIngestFunction: the check streams; <= 512 MB")
    reserved = ingest.get("ReservedConcurrentExecutions")
    reserved_default = int(default_of(template, reserved) or 0)
    check(
        1 <= reserved_default <= MAX_INGEST_CONCURRENCY,
        f"SkinIngestFunction: ReservedConcurrentExecutions must be 1..{MAX_INGEST_CONCURRENCY} "
        f"by default, is {reserved_default}",
    )
    if ref(reserved):
        check(
            int(params.get(ref(reserved), {}).get("MaxValue", 1 << 31)) <= MAX_INGEST_CONCURRENCY,
            f"{ref(reserved)}: MaxValue must be at most {MAX_INGEST_CONCURRENCY}",
        )

    # JSON access logs on the API stage.
    api = resources["Api"]["Properties"]
    access = api.get("AccessLogSetting", {})
    check("DestinationArn" in access, "Api: AccessLogSetting.DestinationArn missing")
    try:
        fields = json.loads(re.sub(r"\$context\.[A-Za-z.]+", "x", access.get("Format", "")))
        check("requestId" in fields and "status" in fields, "Api: access log lacks requestId/status")
    except ValueError:
        failures.append("Api: AccessLogSetting.Format is not a JSON line")

    # An errors and a throttles alarm for every function.
    alarmed = {}
    for r in resources.values():
        p = r.get("Properties", {})
        if r["Type"] == "AWS::CloudWatch::Alarm" and p.get("Namespace") == "AWS/Lambda":
            for d in p.get("Dimensions", []):
                if d.get("Name") == "FunctionName" and ref(d.get("Value")):
                    alarmed.setdefault(ref(d["Value"]), set()).add(p.get("MetricName"))
    for name in functions:
        missing = {"Errors", "Throttles"} - alarmed.get(name, set())
        check(not missing, f"{name}: no alarm on {sorted(missing)}")

    # DB_SSLMODE reaches every function; verify-full unless told otherwise.
    check(ref(globals_env.get("DB_SSLMODE")) == "DbSslMode", "Globals: DB_SSLMODE from DbSslMode")
    check(params.get("DbSslMode", {}).get("Default") == "verify-full", "DbSslMode defaults to verify-full")
    # ... and allows exactly the modes the code reads (support/config/sslmode.rs `DbSslMode::from_str`), so a
    # deploy never passes one the functions refuse at start.
    config_rs = os.path.join(ROOT, "functions/core/src/support/config/sslmode.rs")
    from_str = open(config_rs).read().partition("impl FromStr for DbSslMode")[2].partition("\n}\n")[0]
    code_modes = sorted(re.findall(r'"([a-z-]+)" => Ok\(Self::', from_str))
    allowed = sorted(params.get("DbSslMode", {}).get("AllowedValues", []))
    check(code_modes and allowed == code_modes, f"DbSslMode AllowedValues {allowed} = sslmode.rs modes {code_modes}")

    # An origin only our edge reaches (docs/DEPLOY.md, "An origin only Cloudflare reaches"): the
    # custom domain and no execute-api endpoint by default, mutual TLS available; every API
    # function checks X-Origin-Secret against the secret OriginSecretArn names; the webhook key
    # is read by ARN at start, never resolved into a variable; each secret readable by exactly
    # the functions that need it, and nothing else readable.
    check(params.get("DisableExecuteApiEndpoint", {}).get("Default") == "true",
          "DisableExecuteApiEndpoint defaults to true")
    check(api.get("DisableExecuteApiEndpoint") == {"Fn::If": ["ExecuteApiEndpointDisabled", True, False]},
          "Api: DisableExecuteApiEndpoint from its parameter")
    check({"CustomDomainName", "CertificateArn"} <= set(params), "custom domain parameters")
    domain = resources.get("ApiDomain", {})
    check(domain.get("Type") == "AWS::ApiGateway::DomainName", "ApiDomain: a custom domain")
    check(ref(domain.get("Properties", {}).get("RegionalCertificateArn")) == "CertificateArn",
          "ApiDomain: the CertificateArn certificate")
    check("MutualTlsAuthentication" in domain.get("Properties", {}),
          "ApiDomain: mutual TLS (Authenticated Origin Pulls) available")
    mapping = resources.get("ApiDomainMapping", {})
    check(mapping.get("Type") == "AWS::ApiGateway::BasePathMapping"
          and ref(mapping.get("Properties", {}).get("RestApiId")) == "Api",
          "ApiDomainMapping: the domain maps to the API")
    for name in ("OriginSecretArn", "WebhookSecretArn"):
        check("Default" not in params.get(name, {"Default": None}), f"{name}: a required parameter")
    check("{{resolve:" not in open(template_path).read(), "no {{resolve:...}}: secrets are read at start")
    for name, fn in functions.items():
        props = fn["Properties"]
        env = props.get("Environment", {}).get("Variables", {})
        http = any(e.get("Type") == "Api" for e in props.get("Events", {}).values()) or name in websocket
        readable = set()
        for policy in props.get("Policies", []):
            for statement in policy.get("Statement", []) if isinstance(policy, dict) else []:
                actions = statement.get("Action")
                actions = actions if isinstance(actions, list) else [actions]
                if any(a.startswith("secretsmanager:") for a in actions):
                    check(actions == ["secretsmanager:GetSecretValue"], f"{name}: only GetSecretValue")
                    resource = statement.get("Resource")
                    for item in resource if isinstance(resource, list) else [resource]:
                        check(ref(item) is not None, f"{name}: a secret policy names exact ARNs")
                        readable.add(ref(item))
        # The database secrets it is given (migrate: the master's, and the application role's
        # to create the role from; every other Postgres function: the application role's).
        needed = {ref(env[v]) for v in ("DB_SECRET_ARN", "DB_APP_SECRET_ARN") if v in env}
        expected = ({"DbMigrateSecretArn", "DbSecretArn"} if name == "MigrateFunction"
                    else {"DbSecretArn"} if "DB_SECRET_ARN" in env else set())
        check(needed == expected, f"{name}: database secrets {sorted(needed)}, expected {sorted(expected)}")
        if name == "MigrateFunction":
            check(ref(env.get("DB_SECRET_ARN")) == "DbMigrateSecretArn", "MigrateFunction: DB_SECRET_ARN is the master's")
        if http:
            check(ref(env.get("CF_ORIGIN_SECRET_ARN")) == "OriginSecretArn",
                  f"{name}: CF_ORIGIN_SECRET_ARN from OriginSecretArn")
            needed.add("OriginSecretArn")
        else:
            check("CF_ORIGIN_SECRET_ARN" not in env, f"{name}: no origin secret off the API")
        if "WEBHOOK_SECRET_ARN" in env:
            check(ref(env["WEBHOOK_SECRET_ARN"]) == "WebhookSecretArn", f"{name}: WEBHOOK_SECRET_ARN")
            needed.add("WebhookSecretArn")
        check("WEBHOOK_SECRET" not in env and "CF_ORIGIN_SECRET" not in env,
              f"{name}: no secret value in a variable")
        check(readable == needed, f"{name}: reads secrets {sorted(readable)}, needs {sorted(needed)}")
    check("WEBHOOK_SECRET_ARN" in functions["JobWebhookFunction"]["Properties"]["Environment"]["Variables"],
          "JobWebhookFunction: WEBHOOK_SECRET_ARN")

    # The dashboard: valid JSON, built from the metrics the functions emit.
    dashboard = [r for r in resources.values() if r["Type"] == "AWS::CloudWatch::Dashboard"]
    check(len(dashboard) == 1, "one CloudWatch dashboard")
    if dashboard:
        body = dashboard[0]["Properties"]["DashboardBody"]
        body = body.get("Fn::Sub", body) if isinstance(body, dict) else body
        try:
            widgets = json.loads(re.sub(r"\$\{[^}]+\}", "1", body))["widgets"]
        except (ValueError, KeyError, TypeError):
            widgets = []
            failures.append("Dashboard: DashboardBody is not dashboard JSON")
        text = json.dumps(widgets)
        for needle, what in [
            ('MetricName=\\"Admissions\\"', "admissions per decision"),
            ('"AdmissionLatency"', "admission latency"),
            ('"p50"', "latency p50"),
            ('"p99"', "latency p99"),
            ('"ApproximateNumberOfMessagesVisible"', "queue depth"),
            ('"ApproximateAgeOfOldestMessage"', "oldest message age"),
            ("RenderDeadLetterQueue.QueueName", "the DLQ"),
            ('"RenderingJobs"', "render capacity in use"),
            ('"Errors"', "errors"),
            ('"Throttles"', "throttles"),
            ('"DBInstanceIdentifier", "osurender-${Stage}"', "the database (base.yaml's DBInstanceIdentifier)"),
            ('"ProxyName", "osurender-${Stage}"', "the proxy (base.yaml's DBProxyName)"),
            ('"CallbacksDelivered"', "callbacks delivered (their egress)"),
        ]:
            check(needle in text or needle in body, f"Dashboard: no {what} ({needle})")
        for name in functions:
            for metric in ("Errors", "Throttles"):
                check(
                    re.search(r'"%s",\s*"FunctionName",\s*"\$\{%s\}"' % (metric, name), body),
                    f"Dashboard: no {metric} of {name}",
                )

    # Callbacks: outbox-dispatcher runs in the callback subnets (the NAT gateway's), and beside
    # it only events (its answers go to API Gateway's public Management API, which no VPC
    # endpoint serves) and render (a replay_url is fetched from the internet); every other
    # Postgres function in the private ones; every function knows whether callbacks can leave
    # (CALLBACKS_EGRESS from the base's CallbackEgress).
    for name, fn in functions.items():
        vpc = fn["Properties"].get("VpcConfig", {})
        if name in ("OutboxDispatcherFunction", "EventsFunction", "RenderFunction"):
            check(ref(vpc.get("SubnetIds")) == "CallbackSubnetIds"
                  and ref(vpc.get("SecurityGroupIds")) == "CallbackSecurityGroupIds",
                  f"{name}: in CallbackSubnetIds with CallbackSecurityGroupIds")
        elif vpc:
            check(ref(vpc.get("SubnetIds")) == "VpcSubnetIds" and ref(vpc.get("SecurityGroupIds")) == "VpcSecurityGroupIds",
                  f"{name}: in VpcSubnetIds (no way out) with VpcSecurityGroupIds")
    check(ref(globals_env.get("CALLBACKS_EGRESS")) == "CallbackEgress", "Globals: CALLBACKS_EGRESS from CallbackEgress")

    # Event-driven callbacks: every function that queues a callback (admission, a worker's
    # report, the janitor's endings) or sweeps them may send a wake; the dispatcher is woken by
    # the queue, with room for a wake's sweeps beside a scheduled one.
    check(ref(globals_env.get("CALLBACK_WAKE_QUEUE_URL")) == "CallbackWakeQueue",
          "Globals: CALLBACK_WAKE_QUEUE_URL from CallbackWakeQueue")
    wake_arn = {"Fn::GetAtt": ["CallbackWakeQueue", "Arn"]}
    for name in WAKE_SENDERS:
        sends = [
            statement for policy in functions[name]["Properties"].get("Policies", [])
            for statement in (policy.get("Statement", []) if isinstance(policy, dict) else [])
            if statement.get("Action") == "sqs:SendMessage"
        ]
        resources_sent = [r for st in sends for r in (st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]])]
        check(wake_arn in resources_sent, f"{name}: sqs:SendMessage on CallbackWakeQueue")
    # Fair service: whoever releases jobs publishes their render events, so may send to the
    # render queue, which every function is told (RENDER_QUEUE_URL); the farm's settings reach
    # every function from their parameters.
    check(ref(globals_env.get("RENDER_QUEUE_URL")) == "RenderQueue", "Globals: RENDER_QUEUE_URL from RenderQueue")
    render_arn = {"Fn::GetAtt": ["RenderQueue", "Arn"]}
    for name in RELEASERS:
        sends = [
            statement for policy in functions[name]["Properties"].get("Policies", [])
            for statement in (policy.get("Statement", []) if isinstance(policy, dict) else [])
            if statement.get("Action") == "sqs:SendMessage"
        ]
        resources_sent = [r for st in sends for r in (st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]])]
        check(render_arn in resources_sent, f"{name}: sqs:SendMessage on RenderQueue (it releases jobs)")
    for variable, parameter in FARM_SETTINGS.items():
        check(ref(globals_env.get(variable)) == parameter, f"Globals: {variable} from {parameter}")
    dispatcher = functions["OutboxDispatcherFunction"]["Properties"]
    wakes = [e["Properties"] for e in dispatcher.get("Events", {}).values() if e.get("Type") == "SQS"]
    check(len(wakes) == 1 and wakes[0].get("Queue") == wake_arn,
          "OutboxDispatcherFunction: woken by CallbackWakeQueue (an SQS event)")
    if wakes:
        most = wakes[0].get("ScalingConfig", {}).get("MaximumConcurrency")
        check(isinstance(most, int) and most < dispatcher.get("ReservedConcurrentExecutions", 0),
              "OutboxDispatcherFunction: reserved concurrency above the wake's MaximumConcurrency "
              "(a scheduled sweep fits beside the wakes')")
    queue = resources.get("CallbackWakeQueue", {}).get("Properties", {})
    check(queue.get("VisibilityTimeout", 0) >= 6 * dispatcher.get("Timeout", 0),
          "CallbackWakeQueue: VisibilityTimeout at least six times the dispatcher's Timeout")
    check(queue.get("MessageRetentionPeriod", 0) >= MAX_WAKE_DELAY + queue.get("VisibilityTimeout", 0),
          "CallbackWakeQueue: MessageRetentionPeriod outlasts the longest wake delay and one failed receipt")
    watched = [
        q["MetricStat"]["Metric"] for q in
        resources.get("CallbackWakesFailedAlarm", {}).get("Properties", {}).get("Metrics", [])
        if "MetricStat" in q
    ]
    for name in WAKE_SENDERS:
        check({"Namespace": "osurender", "MetricName": "CallbackWakesFailed",
               "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": name}}]} in watched,
              f"CallbackWakesFailedAlarm: watches {name}'s failed wakes")

    # Lifecycles: renders/ go with their jobs (JOB_RETENTION), incoming/ stays as long as the
    # failure queue keeps the events that point at it.
    check(globals_env.get("JOB_RETENTION") == {"Fn::Sub": "${JobRetentionDays}d"}, "Globals: JOB_RETENTION from JobRetentionDays")
    rules = {r.get("Prefix"): r for r in bucket["Properties"]["LifecycleConfiguration"]["Rules"]}
    check(ref(rules.get("renders/", {}).get("ExpirationInDays")) == "JobRetentionDays",
          "Bucket: renders/ expire after JobRetentionDays")
    incoming_days = rules.get("incoming/", {}).get("ExpirationInDays")
    failure_retention = resources["SkinIngestFailureQueue"]["Properties"].get("MessageRetentionPeriod")
    check(isinstance(incoming_days, int) and incoming_days * 86400 == failure_retention,
          f"Bucket: incoming/ kept {incoming_days} days, SkinIngestFailureQueue keeps events {failure_retention} s")
    # Log groups: a retention, and deleted with the stack (a kept one under its fixed name would
    # stop the stage being made again).
    for name, r in resources.items():
        if r["Type"] == "AWS::Logs::LogGroup":
            check(r.get("DeletionPolicy") == "Delete" and r.get("UpdateReplacePolicy") == "Delete",
                  f"{name}: DeletionPolicy and UpdateReplacePolicy Delete")
            check(ref(r["Properties"].get("RetentionInDays")) == "LogRetentionDays",
                  f"{name}: RetentionInDays from LogRetentionDays")

    # Alarms that reach someone: prod refuses to deploy without a topic, and every alarm tells it.
    check(
        any(
            rule.get("RuleCondition") == {"Fn::Equals": [{"Ref": "Stage"}, "prod"]}
            and {"Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]}
            in [a.get("Assert") for a in rule.get("Assertions", [])]
            for rule in template.get("Rules", {}).values()
        ),
        "Rules: prod refuses an empty AlarmTopicArn",
    )
    notify = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
    alarms = {n: r["Properties"] for n, r in resources.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    for name, p in alarms.items():
        check(p.get("AlarmActions") == notify and p.get("OKActions") == notify, f"{name}: notifies AlarmTopicArn")

    def watches(metric, namespace=None, dimension_ref=None):
        for p in alarms.values():
            stats = [p] + [m.get("MetricStat", {}).get("Metric", {}) for m in p.get("Metrics", [])]
            for s in stats:
                if s.get("MetricName") == metric and (namespace is None or s.get("Namespace") == namespace):
                    dims = [d.get("Value") for d in s.get("Dimensions", [])]
                    if dimension_ref is None or dimension_ref in dims:
                        yield p

    queue_name = lambda q: {"Fn::GetAtt": [q, "QueueName"]}
    check(any(watches("ApproximateAgeOfOldestMessage", "AWS/SQS", queue_name("RenderQueue"))),
          "an alarm on the render queue's ApproximateAgeOfOldestMessage")
    check(any(watches("4XXError", "AWS/ApiGateway")), "an alarm on the API's 4XX")
    check(any(watches("CallbacksFailed", "osurender", {"Ref": "OutboxDispatcherFunction"})),
          "an alarm on osurender CallbacksFailed of outbox-dispatcher")
    check(any(p.get("MetricName") == "NumberOfMessagesSent" for p in watches("NumberOfMessagesSent", "AWS/SQS", queue_name("SkinIngestFailureQueue"))),
          "SkinIngestFailureQueue: an alarm on arrivals (NumberOfMessagesSent)")
    check(any("DIFF(" in json.dumps(p.get("Metrics")) for p in watches("ApproximateNumberOfMessagesVisible", "AWS/SQS", queue_name("RenderDeadLetterQueue"))),
          "RenderDeadLetterQueue: an alarm on arrivals (DIFF of its depth)")
    check(resources.get("PublicHealthCheck", {}).get("Condition") == "HasSyntheticCheck"
          and any(watches("HealthCheckStatus", "AWS/Route53", {"Ref": "PublicHealthCheck"})),
          "the synthetic /health check (parameter-gated) and its alarm")

    check_live_events(template, resources, functions, params, watches)

    # The worker contract: a policy document, only what a render worker does, on this stack's things.
    worker = template.get("Outputs", {}).get("RenderWorkerPolicy", {}).get("Value", {}).get("Fn::Sub", [""])[0]
    try:
        statements = json.loads(re.sub(r"\$\{[^}]+\}", "x", worker))["Statement"]
        actions = sorted(a for st in statements for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"]))
        check(actions == sorted(["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility",
                                 "sqs:GetQueueAttributes", "s3:GetObject", "s3:PutObject", "secretsmanager:GetSecretValue"]),
              f"RenderWorkerPolicy: actions {actions}")
        check("${RenderQueue.Arn}" in worker and "${BucketArn}/renders/*" in worker and "${WebhookSecretArn}" in worker,
              "RenderWorkerPolicy: this stack's queue, renders/ and webhook key")
    except (ValueError, KeyError, TypeError):
        failures.append("RenderWorkerPolicy: not a policy document")

    # samconfig's prod names DbSslMode explicitly and says what the first deploy must add.
    # (Text, not tomllib: the deploy venv's Python may predate 3.11.)
    samconfig = open(samconfig_path).read()
    prod = re.search(r"^\[prod\.deploy\.parameters\]\n(.*?)(?=^\[|\Z)", samconfig, re.M | re.S)
    check(
        prod is not None and '"DbSslMode=verify-full"' in prod.group(1),
        "samconfig prod: DbSslMode=verify-full",
    )

    for failure in failures:
        print(f"template property: {failure}", file=sys.stderr)
    if failures:
        sys.exit(1)
    print(f"template properties hold ({len(functions)} functions, {connections} connections by default)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
