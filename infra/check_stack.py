"""The two templates as one stack, asserted one by one (run by infra/lint-template).

    python infra/check_stack.py <repo root>

1. The app takes the base's outputs: template.yaml's "From the base stack" parameter group is
   exactly infra/base.yaml's outputs, and each output fits its parameter: the parameter's type
   is what the output holds (a list of subnet ids, a security group list, a string) and a value
   of the output's kind passes the parameter's constraints (pattern, allowed values).
2. The connection budget of every samconfig.toml environment: its functions' reserved
   concurrency x DbPoolSize within its base environment's proxy (DbMaxConnections x
   ProxyMaxConnectionsPercent), and at every parameter's maximum within PostgreSQL's 5000;
   and each keeps part of the queue for API keys (AnonymousQueueShare below 1).
3. API Gateway's own answers (GatewayResponses): problem+json bodies valid against
   openapi.yaml's Problem schema; a code the service answers too matches its row of
   functions/core/src/support/problem.rs (status, title, Retry-After); the gateway's own codes
   are documented in docs/DEPLOY.md; every 429 and 503 carries Retry-After; all no-store.
4. infra/deploy_params.py, the parameter list infra/deploy builds: precedence, the Stage guard,
   and that the SAM CLI reads the file it writes back to the same values.
5. The AZ ids RDS Proxy is not offered in: infra/base.yaml's rule and infra/deploy agree.
6. Deletion policies CloudFormation accepts as written: neither template uses the
   AWS::LanguageExtensions transform (it refuses RetainExceptOnCreate), so every DeletionPolicy
   and UpdateReplacePolicy is a literal CloudFormation knows; a resource with a fixed name that
   outlives its stack (Retain) would stop the stage being made again, so none does.
7. docs/DEPLOY.md says what the templates do: its per-route throttle table is template.yaml's
   MethodSettings (route, function and its reserved concurrency, rate, burst), every alarm it
   names exists, every alarm but the per-function Errors/Throttles pair is named in it, and the
   wake queue's retention it states is CallbackWakeQueue's.
8. What a stage costs and keeps: each log type the database exports has its log group, made
   before the database, with a retention; every stage has its AWS Budgets budget on the alarm
   topic, a MonthlyBudgetUsd and the cost tag in samconfig (infra/cost.py holds the idle cost
   under it).
"""
import json
import os
import re
import sys
import tempfile

import jsonschema
import yaml
from samtranslator.yaml_helper import yaml_parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_params as dp  # noqa: E402

BASE_GROUP = "From the base stack"
POSTGRES_MAX_CONNECTIONS = 5000  # PostgreSQL on RDS: max_connections' ceiling

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)


# ---------------------------------------------------------------- 1. base outputs = app parameters

# A value of each kind an output can hold, for the app parameter's constraints.
SAMPLES = {
    "AWS::SecretsManager::Secret": "arn:aws:secretsmanager:us-east-1:123456789012:secret:osurender/prod/db-app-AbC123",
    "AWS::SNS::Topic": "arn:aws:sns:us-east-1:123456789012:osurender-prod-alarms",
    "AWS::EC2::EIP": "203.0.113.7",
    ("AWS::RDS::DBProxy", "Endpoint"): "osurender-prod.proxy-abcdefghijkl.us-east-1.rds.amazonaws.com",
    ("AWS::RDS::DBInstance", "Endpoint.Address"): "osurender-dev.abcdefghijkl.us-east-1.rds.amazonaws.com",
}
LIST_TYPES = {
    "AWS::EC2::Subnet": "List<AWS::EC2::Subnet::Id>",
    "AWS::EC2::SecurityGroup": "List<AWS::EC2::SecurityGroup::Id>",
}


def output_kind(base, value):
    """(the app parameter type the output needs, [sample values it may hold])."""
    resources, params = base["Resources"], base["Parameters"]
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, items = value["Fn::Join"]
        types = {resources[i["Ref"]]["Type"] for i in items if isinstance(i, dict) and "Ref" in i}
        if sep == "," and len(types) == 1 and types <= set(LIST_TYPES):
            return LIST_TYPES[types.pop()], []
        return None, []
    if isinstance(value, dict) and "Fn::If" in value:
        kinds = [output_kind(base, branch) for branch in value["Fn::If"][1:]]
        types = {k[0] for k in kinds}
        return (types.pop() if len(types) == 1 else None), [s for k in kinds for s in k[1]]
    if isinstance(value, dict) and "Ref" in value:
        name = value["Ref"]
        if name in params:
            spec = params[name]
            return "String", [str(v) for v in spec.get("AllowedValues", [spec.get("Default", "")])]
        rtype = resources[name]["Type"]
        return ("String", [SAMPLES[rtype]]) if rtype in SAMPLES else (None, [])
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        name, attribute = value["Fn::GetAtt"]
        key = (resources[name]["Type"], attribute)
        return ("String", [SAMPLES[key]]) if key in SAMPLES else (None, [])
    if isinstance(value, str):
        return "String", [value]
    return None, []


def accepts(spec, value):
    if "AllowedValues" in spec and value not in [str(v) for v in spec["AllowedValues"]]:
        return False
    if "AllowedPattern" in spec and re.fullmatch(spec["AllowedPattern"], value) is None:
        return False
    return len(value) >= int(spec.get("MinLength", 0))


def check_contract(base, app):
    outputs = base.get("Outputs", {})
    params = app["Parameters"]
    groups = app.get("Metadata", {}).get("AWS::CloudFormation::Interface", {}).get("ParameterGroups", [])
    fed = [g for g in groups if g.get("Label", {}).get("default", "").startswith(BASE_GROUP)]
    check(len(fed) == 1, f"template.yaml: one parameter group labelled {BASE_GROUP!r}")
    fed = set(fed[0]["Parameters"]) if fed else set()
    check(fed == set(outputs),
          f"the app's base parameters {sorted(fed)} are not the base's outputs {sorted(outputs)}: "
          f"only in the app {sorted(fed - set(outputs))}, only in the base {sorted(set(outputs) - fed)}")
    for name, output in outputs.items():
        spec = params.get(name)
        check(spec is not None, f"base output {name}: template.yaml has no parameter {name}")
        if spec is None:
            continue
        wanted, samples = output_kind(base, output.get("Value"))
        check(wanted is not None, f"base output {name}: cannot tell what it holds ({output.get('Value')})")
        check(spec.get("Type") == wanted, f"{name}: template.yaml's type {spec.get('Type')}, the base output holds {wanted}")
        for sample in samples:
            check(accepts(spec, sample), f"{name}: template.yaml's constraints refuse a value the base gives, {sample!r}")
        check(not spec.get("NoEcho"), f"{name}: NoEcho would hide a base output that is no secret")
    # Each secret output is one of the base's secrets, each list output names two AZs' subnets.
    for name in ("VpcSubnetIds", "CallbackSubnetIds"):
        items = outputs.get(name, {}).get("Value", {}).get("Fn::Join", [None, []])[1]
        azs = {base["Resources"][i["Ref"]]["Properties"].get("AvailabilityZoneId", {}).get("Ref") for i in items}
        check(azs == {"AvailabilityZoneId1", "AvailabilityZoneId2"}, f"{name}: one subnet in each AZ id, {azs}")


# ---------------------------------------------------------------- 2. the connection budget

def env_values(template, samconfig, env, computed=None):
    overrides = dp.pairs(dp.samconfig_env(samconfig, env).get("parameter_overrides"))
    return dp.plain(dp.resolve(template, overrides, computed=computed))


def app_environments(samconfig):
    import tomlkit
    config = tomlkit.parse(open(samconfig).read()).unwrap()
    return [env for env, section in config.items()
            if isinstance(section, dict) and "deploy" in section and not env.endswith("-base")]


# What infra/deploy computes from the base stack: any value the parameter accepts.
BASE_OUTPUTS = {"VpcSubnetIds": "subnet-1,subnet-2", "VpcSecurityGroupIds": "sg-1", "CallbackSubnetIds": "subnet-3,subnet-4",
                "CallbackSecurityGroupIds": "sg-2", "CallbackEgress": "true", "CallbackEgressIps": "",
                "DbProxyEndpoint": "proxy", "DbSecretArn": SAMPLES["AWS::SecretsManager::Secret"],
                "DbMigrateSecretArn": SAMPLES["AWS::SecretsManager::Secret"],
                "OriginSecretArn": SAMPLES["AWS::SecretsManager::Secret"], "WebhookSecretArn": SAMPLES["AWS::SecretsManager::Secret"],
                "AlarmTopicArn": SAMPLES["AWS::SNS::Topic"]}


def check_budget(root, base, app):
    samconfig = os.path.join(root, "samconfig.toml")
    envs = app_environments(samconfig)
    check({"default", "dev", "prod"} <= set(envs), f"samconfig.toml environments {envs}")
    for env in envs:
        try:
            app_values = env_values(app, samconfig, env, BASE_OUTPUTS)
            base_env = f"{app_values['Stage']}-base"
            base_values = env_values(base, samconfig, base_env,
                                     {"AvailabilityZoneId1": "use1-az1", "AvailabilityZoneId2": "use1-az2",
                                      "AlarmEmail": "alarms@example.com"})
            base_resolved = dp.resolve(base, dp.pairs(dp.samconfig_env(samconfig, base_env).get("parameter_overrides")),
                                       computed={"AvailabilityZoneId1": "use1-az1", "AvailabilityZoneId2": "use1-az2",
                                                 "AlarmEmail": "alarms@example.com"})
            dp.check_rules(base, base_resolved, "us-east-1")
            asked, allowed = dp.check_budget(app, app_values, base_values)
            print(f"  [{env}] with [{base_env}]: {asked} connections of the proxy's {allowed}")
        except dp.DeployError as error:
            failures.append(f"samconfig [{env}]: {error}")
    # Every parameter at its maximum: within the largest database's max_connections.
    params = app["Parameters"]
    tops = {}
    for name in set(dp.CONCURRENCY.values()) | {"DbPoolSize"}:
        check("MaxValue" in params[name], f"{name}: a MaxValue (the connection budget's maxima)")
        tops[name] = str(params[name].get("MaxValue", 1 << 20))
    at_max = dp.connections(app, {**{n: str(p.get("Default", "")) for n, p in params.items()}, **tops})
    base_max = int(base["Parameters"]["DbMaxConnections"]["MaxValue"])
    check(base_max <= POSTGRES_MAX_CONNECTIONS, f"DbMaxConnections' MaxValue {base_max} above PostgreSQL's {POSTGRES_MAX_CONNECTIONS}")
    check(at_max <= POSTGRES_MAX_CONNECTIONS,
          f"every concurrency parameter and DbPoolSize at its MaxValue: {at_max} connections, above {POSTGRES_MAX_CONNECTIONS}")
    print(f"  every parameter at its maximum: {at_max} connections (PostgreSQL's ceiling {POSTGRES_MAX_CONNECTIONS})")


def check_key_reserve(root, app):
    """Every deployed stage keeps part of the queue for API keys: anonymous clients together
    hold less than all of it (ANONYMOUS_QUEUE_SHARE below 1; docs/DEPLOY.md, the
    `AnonymousQueueShare` row), so a flood from many networks still leaves keys room."""
    samconfig = os.path.join(root, "samconfig.toml")
    for env in app_environments(samconfig):
        try:
            share = env_values(app, samconfig, env, BASE_OUTPUTS)["AnonymousQueueShare"]
        except dp.DeployError:
            continue  # check_budget reports it
        check(0 < float(share) < 1, f"samconfig [{env}]: AnonymousQueueShare {share} keeps no reserve for keys (below 1)")


# ---------------------------------------------------------------- 3. the gateway's own answers

def problem_rows(problem_rs):
    """code -> (status, title, Retry-After seconds or None) from the problem_kinds! table."""
    text = open(problem_rs).read()
    consts = {m.group(1): int(m.group(2)) for m in re.finditer(r"const (RETRY_[A-Z_]+): u64 = (\d+);", text)}
    statuses = {"BAD_REQUEST": 400, "UNAUTHORIZED": 401, "FORBIDDEN": 403, "NOT_FOUND": 404,
                "METHOD_NOT_ALLOWED": 405, "CONFLICT": 409, "PAYLOAD_TOO_LARGE": 413,
                "UNSUPPORTED_MEDIA_TYPE": 415, "UNPROCESSABLE_ENTITY": 422, "TOO_MANY_REQUESTS": 429,
                "INTERNAL_SERVER_ERROR": 500, "SERVICE_UNAVAILABLE": 503}
    rows = {}
    for m in re.finditer(r'^\s*[A-Z_]+: "([a-z_]+)", ([A-Z_]+), "([^"]+)", (Never|Estimated|Fixed\(([A-Z_]+)\));', text, re.M):
        code, status, title, retry, fixed = m.groups()
        rows[code] = (statuses.get(status), title, consts.get(fixed) if fixed else (None if retry == "Never" else "estimated"))
    return rows


def check_gateway_responses(root, app):
    doc = yaml.safe_load(open(os.path.join(root, "openapi.yaml")))
    schema = dict(doc["components"]["schemas"]["Problem"])
    rows = problem_rows(os.path.join(root, "functions/core/src/support/problem.rs"))
    check(len(rows) > 20, f"read the problem table: {len(rows)} rows")
    deploy_md = open(os.path.join(root, "docs/DEPLOY.md")).read()
    responses = app["Resources"]["Api"]["Properties"].get("GatewayResponses", {})
    for kind in ("MISSING_AUTHENTICATION_TOKEN", "REQUEST_TOO_LARGE", "ACCESS_DENIED", "THROTTLED",
                 "INTEGRATION_FAILURE", "INTEGRATION_TIMEOUT", "DEFAULT_5XX"):
        check(kind in responses, f"GatewayResponses: {kind} missing")
    for kind, response in responses.items():
        headers = response.get("ResponseParameters", {}).get("Headers", {})
        status = int(response.get("StatusCode", 0))
        body = response.get("ResponseTemplates", {}).get("application/json", "")
        try:
            problem = json.loads(body)
            jsonschema.validate(problem, schema)
        except (ValueError, jsonschema.ValidationError) as error:
            failures.append(f"GatewayResponses {kind}: not a Problem ({str(error).splitlines()[0]})")
            continue
        check(headers.get("Content-Type") == "'application/problem+json'", f"{kind}: Content-Type problem+json")
        check(headers.get("Cache-Control") == "'no-store'", f"{kind}: Cache-Control no-store")
        check(problem["status"] == status, f"{kind}: body status {problem['status']}, StatusCode {status}")
        check(problem["type"] == f"/problems/{problem['code']}", f"{kind}: type /problems/{problem['code']}")
        retry = headers.get("Retry-After")
        if status in (429, 503):
            check(isinstance(retry, str) and re.fullmatch(r"'[1-9][0-9]*'", retry), f"{kind}: {status} without Retry-After")
        row = rows.get(problem["code"])
        if row:
            want_status, want_title, want_retry = row
            check((status, problem["title"]) == (want_status, want_title),
                  f"{kind}: {status} {problem['title']!r}, problem.rs says {want_status} {want_title!r} for {problem['code']}")
            check(retry == (f"'{want_retry}'" if want_retry else None),
                  f"{kind}: Retry-After {retry}, problem.rs says {want_retry} for {problem['code']}")
        else:  # the gateway's own code: documented in DEPLOY.md's table of them
            check(re.search(rf"^\| `{problem['code']}` \| {status} ", deploy_md, re.M),
                  f"{kind}: code {problem['code']} is the gateway's own; docs/DEPLOY.md's table must list it ({status})")


# ---------------------------------------------------------------- 4. the parameter list infra/deploy builds

def check_deploy_params(app):
    overrides = {"Stage": "prod", "LogRetentionDays": "90", "DbSslMode": "verify-full"}
    computed = {"VpcSubnetIds": "subnet-1,subnet-2", "VpcSecurityGroupIds": "sg-1", "CallbackSubnetIds": "subnet-3,subnet-4",
                "CallbackSecurityGroupIds": "sg-2", "CallbackEgress": "true", "CallbackEgressIps": "203.0.113.7",
                "DbProxyEndpoint": "proxy.example", "DbName": "osurender", "DbSecretArn": "a", "DbMigrateSecretArn": "b",
                "OriginSecretArn": "c", "WebhookSecretArn": "d", "AlarmTopicArn": "e"}
    values = dp.resolve(app, overrides, computed, {"LogLevel": "debug", "CustomDomainName": "api.example.com",
                                                   "CertificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/x"}, stage="prod")
    check(values["Stage"] == ("prod", "samconfig"), "deploy_params: samconfig's Stage kept beside --parameter-overrides")
    check(values["LogLevel"] == ("debug", "override") and values["LogRetentionDays"] == ("90", "samconfig"),
          "deploy_params: an override wins, samconfig's other values stay")
    check(values["DbSecretArn"] == ("a", "computed"), "deploy_params: a base output fills its parameter")
    check(values["OutboxDispatchSchedule"] == ("rate(1 minute)", "default"), "deploy_params: defaults filled in")
    check(len(values) == len(app["Parameters"]), "deploy_params: every parameter has its value")
    for bad, what in [
        (lambda: dp.resolve(app, overrides, computed, {"Stage": "dev"}, stage="prod"), "a Stage other than the one deployed"),
        (lambda: dp.resolve(app, {}, computed, {}, stage="prod"), "a prod deploy whose samconfig list lost Stage=prod"),
        (lambda: dp.resolve(app, overrides, {}, {}, stage="prod"), "a missing base output"),
        (lambda: dp.resolve(app, overrides, computed, {"NoSuchParameter": "1"}), "an unknown parameter"),
        (lambda: dp.resolve(app, overrides, computed, {"CallbackEgress": "maybe"}), "a value outside AllowedValues"),
    ]:
        try:
            bad()
            failures.append(f"deploy_params: accepted {what}")
        except dp.DeployError:
            pass
    # The templates' Rules, evaluated before anything is deployed (as CloudFormation will).
    dp.check_rules(app, values, "us-east-1")
    for broken, rule in [({"AlarmTopicArn": ""}, "AlarmTopicInProd"), ({"DevCallerCidr": "203.0.113.7/32"}, "DevCallerNotInProd"),
                         ({"BrowserOrigin": "*"}, "BrowserOriginNotAnyInProd")]:
        try:
            dp.check_rules(app, dp.resolve(app, overrides, {**computed, **broken}, {"CustomDomainName": "a.example", "CertificateArn": "c"}), "us-east-1")
            failures.append(f"deploy_params: rule {rule} not enforced before the deploy")
        except dp.DeployError as error:
            check(rule in str(error), f"deploy_params: {rule} expected, {error}")
    existing = {"AvailabilityZoneId1": "use1-az6", "Stage": "dev"}
    base_like = {"Parameters": {"Stage": {"Type": "String", "Default": "dev"}, "AvailabilityZoneId1": {"Type": "String"}}}
    kept = dp.resolve(base_like, {}, existing=existing)
    check(kept["AvailabilityZoneId1"] == ("use1-az6", "stack"), "deploy_params: a parameter without a default keeps the stack's value")
    check(dp.pairs(['A=b=c', 'B="x y"']) == {"A": "b=c", "B": "x y"}, "deploy_params: Key=Value parsing")
    # The SAM CLI reads the file infra/deploy writes back to the very values (spaces, commas, '=').
    from samcli.cli.types import CfnParameterOverridesType
    plain = dp.plain(values)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        pass
    dp.write(values, f.name)
    try:
        read = CfnParameterOverridesType().convert((f"file://{f.name}",), None, None)
        check(read == plain, f"sam deploy reads the parameter file differently: {set(read.items()) ^ set(plain.items())}")
    finally:
        os.unlink(f.name)


# ---------------------------------------------------------------- 5. RDS Proxy's AZs

def check_proxy_azs(root, base):
    rule = json.dumps(base.get("Rules", {}).get("RdsProxyAvailabilityZones", {}))
    in_rule = set(re.findall(r'\[\["([a-z0-9-]+)"', rule)) | set(re.findall(r'"([a-z]+[0-9]+-az[0-9]+)"', rule))
    script = open(os.path.join(root, "infra/deploy")).read()
    m = re.search(r'^RDS_PROXY_EXCLUDED_AZS="([^"]*)"', script, re.M)
    check(m is not None, "infra/deploy: RDS_PROXY_EXCLUDED_AZS")
    in_script = set(m.group(1).split()) if m else set()
    check(in_rule and in_rule == in_script, f"AZ ids without RDS Proxy: base.yaml {sorted(in_rule)}, infra/deploy {sorted(in_script)}")


# ---------------------------------------------------------------- 6. deletion policies

POLICIES = {"DeletionPolicy": {"Delete", "Retain", "RetainExceptOnCreate", "Snapshot"},
            "UpdateReplacePolicy": {"Delete", "Retain", "Snapshot"}}
# The properties that name a resource (a second one under the name fails "already exists").
NAME_PROPERTIES = ("BucketName", "LogGroupName", "Name", "DBInstanceIdentifier", "TopicName", "QueueName")


def check_policies(root):
    for path in ("infra/base.yaml", "template.yaml"):
        text = open(os.path.join(root, path)).read()
        template = yaml_parse(text)
        transforms = template.get("Transform", [])
        transforms = transforms if isinstance(transforms, list) else [transforms]
        check("AWS::LanguageExtensions" not in transforms,
              f"{path}: Transform AWS::LanguageExtensions (it refuses RetainExceptOnCreate; deploys fail)")
        for name, resource in template.get("Resources", {}).items():
            for attribute, allowed in POLICIES.items():
                value = resource.get(attribute)
                if value is None:
                    continue
                check(isinstance(value, str) and value in allowed,
                      f"{path} {name}: {attribute} {value!r} is not a literal of {sorted(allowed)} "
                      f"(an intrinsic function there needs AWS::LanguageExtensions)")
            named = any(p in resource.get("Properties", {}) for p in NAME_PROPERTIES)
            check(not (named and resource.get("DeletionPolicy") == "Retain"),
                  f"{path} {name}: a fixed name kept by DeletionPolicy Retain stops the stage being made again")


# ---------------------------------------------------------------- 7. DEPLOY.md = the templates

def doc_throttles(doc):
    """docs/DEPLOY.md's table under **A throttle per route**: {(METHOD, path): (function, reserved, rate, burst)}."""
    section = doc.partition("**A throttle per route**")[2].partition("\n\n###")[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([A-Z]+) (/[^`]*)` \| ([a-z-]+)(?: \((\d+)\))? \| ([\d.]+) \| (\d+) \|", line)
        if m:
            method, path, function, reserved, rate, burst = m.groups()
            rows[(method, path)] = (function, reserved and int(reserved), float(rate), int(burst))
    return rows


def check_doc(root, base, app):
    doc = open(os.path.join(root, "docs/DEPLOY.md")).read()
    # The throttle table.
    settings = {(s["HttpMethod"], s["ResourcePath"][1:].replace("~1", "/")): s
                for s in app["Resources"]["Api"]["Properties"]["MethodSettings"] if s["ResourcePath"] != "/*"}
    served = {}
    for name, r in app["Resources"].items():
        if r["Type"] != "AWS::Serverless::Function":
            continue
        for e in r["Properties"].get("Events", {}).values():
            if e.get("Type") == "Api":
                served[(e["Properties"]["Method"].upper(), e["Properties"]["Path"])] = (name, r["Properties"])
    rows = doc_throttles(doc)
    check(set(rows) == set(settings), f"DEPLOY.md's throttle table routes {sorted(set(rows) ^ set(settings))} differ from MethodSettings")
    for route, (function, reserved, rate, burst) in rows.items():
        s = settings.get(route)
        if s is None:
            continue
        check((float(s["ThrottlingRateLimit"]), s["ThrottlingBurstLimit"]) == (rate, burst),
              f"DEPLOY.md's throttle of {' '.join(route)} is {rate:g}/{burst}, template.yaml's "
              f"{s['ThrottlingRateLimit']}/{s['ThrottlingBurstLimit']}")
        name, props = served.get(route, (None, {}))
        expected = re.sub(r"(?<!^)([A-Z])", r"-\1", (name or "").removesuffix("Function")).lower()
        check(function == expected, f"DEPLOY.md names {function} behind {' '.join(route)}, template.yaml {expected}")
        if reserved is not None:
            value = props.get("ReservedConcurrentExecutions")
            default = app["Parameters"][value["Ref"]]["Default"] if isinstance(value, dict) else value
            check(int(default) == reserved, f"DEPLOY.md: {function} reserves {reserved}, template.yaml {default}")
    # The alarms.
    names = set(base["Resources"]) | set(app["Resources"])
    for alarm in sorted(set(re.findall(r"`([A-Z][A-Za-z0-9]+Alarm)`", doc))):
        check(alarm in names, f"DEPLOY.md names {alarm}, which neither template has")
    for template in (base, app):
        for name, r in template["Resources"].items():
            if r["Type"] == "AWS::CloudWatch::Alarm" and not re.search(r"(Errors|Throttles)Alarm$", name):
                check(f"`{name}`" in doc, f"{name} is not in DEPLOY.md")
    # The wake queue's retention.
    m = re.search(r"`CallbackWakeQueue` keeps messages (\d+) s", doc)
    retention = app["Resources"]["CallbackWakeQueue"]["Properties"].get("MessageRetentionPeriod")
    check(m is not None and int(m.group(1)) == retention,
          f"DEPLOY.md: `CallbackWakeQueue` keeps messages {m and m.group(1)} s, template.yaml {retention}")


# ---------------------------------------------------------------- 8. logs and budget

def check_cost_guards(root, base):
    resources = base["Resources"]
    db = resources["Database"]
    check(db["Properties"].get("DBInstanceIdentifier") == {"Fn::Sub": "osurender-${Stage}"},
          "Database: DBInstanceIdentifier osurender-${Stage} (its log groups and the dashboard name it)")
    depends = db.get("DependsOn", [])
    depends = [depends] if isinstance(depends, str) else depends
    for kind in db["Properties"].get("EnableCloudwatchLogsExports", []):
        wanted = {"Fn::Sub": f"/aws/rds/instance/osurender-${{Stage}}/{kind}"}
        groups = [n for n, r in resources.items() if r["Type"] == "AWS::Logs::LogGroup"
                  and r["Properties"].get("LogGroupName") == wanted]
        check(len(groups) == 1 and "RetentionInDays" in resources[groups[0]]["Properties"] and groups[0] in depends,
              f"Database exports {kind}: its log group, with a retention, made before the database")
    budgets = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Budgets::Budget"]
    check(len(budgets) == 1, "base.yaml: one AWS::Budgets::Budget")
    for b in budgets:
        check(b["Budget"].get("BudgetLimit", {}).get("Amount") == {"Ref": "MonthlyBudgetUsd"}, "Budget: MonthlyBudgetUsd")
        subscribers = [sub for n in b.get("NotificationsWithSubscribers", []) for sub in n["Subscribers"]]
        check(subscribers and all(sub == {"SubscriptionType": "SNS", "Address": {"Ref": "AlarmTopic"}} for sub in subscribers),
              "Budget: notifies the alarm topic")
    import tomlkit
    config = tomlkit.parse(open(os.path.join(root, "samconfig.toml")).read()).unwrap()
    for env in [e for e in config if e.endswith("-base")]:
        deploy = config[env].get("deploy", {}).get("parameters", {})
        stage = dp.pairs(deploy.get("parameter_overrides")).get("Stage")
        check("MonthlyBudgetUsd" in dp.pairs(deploy.get("parameter_overrides")), f"samconfig [{env}]: MonthlyBudgetUsd")
        for part in (env, env[: -len("-base")]):
            tags = config.get(part, {}).get("deploy", {}).get("parameters", {}).get("tags", "")
            check(f"osurender-stage={stage}" in str(tags).split(), f"samconfig [{part}]: tags osurender-stage={stage} (the budget's filter)")


def main(root):
    base = yaml_parse(open(os.path.join(root, "infra/base.yaml")).read())
    app = yaml_parse(open(os.path.join(root, "template.yaml")).read())
    check_contract(base, app)
    check_budget(root, base, app)
    check_key_reserve(root, app)
    check_gateway_responses(root, app)
    check_deploy_params(app)
    check_proxy_azs(root, base)
    check_policies(root)
    check_doc(root, base, app)
    check_cost_guards(root, base)
    for failure in failures:
        print(f"stack property: {failure}", file=sys.stderr)
    if failures:
        sys.exit(1)
    print(f"stack properties hold ({len(base.get('Outputs', {}))} base outputs = the app's base parameters, "
          f"the connection budget of every environment, {len(app['Resources']['Api']['Properties']['GatewayResponses'])} "
          f"gateway responses, the deploy parameter list)")


if __name__ == "__main__":
    main(sys.argv[1])
