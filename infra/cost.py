"""What a stage costs idle (no traffic), from both templates, the stage's parameter values and a
checked-in price list (infra/prices-<region>.json: region, date, source).

    python infra/cost.py --table                        # docs/DEPLOY.md's table, every samconfig stage
    python infra/cost.py --check-doc docs/DEPLOY.md     # the doc's table is this one (infra/lint-template)
    python infra/cost.py --write-doc docs/DEPLOY.md     # rewrite it between its markers
    python infra/cost.py --stage dev --base-values B.yaml --app-values A.yaml
                                                        # infra/deploy --check: one stage, its budget

Counted: every resource billed by the hour or the month whatever the traffic (NAT gateway or
NAT instance and its disk, the public IPv4 address, interface endpoints per AZ, the RDS instance (Multi-AZ doubles it),
its gp3 storage, RDS Proxy per vCPU of its target, secrets, CloudWatch alarms per metric and
dashboards, the Route 53 health check) and the scheduled functions' invocations. Not counted:
what grows with use (requests, S3 objects, DynamoDB, SQS, logs, data processed), free tiers,
taxes. A resource's Condition is evaluated, so a parameter that removes a resource removes its
line.
"""
import argparse
import json
import os
import re
import sys

import yaml
from samtranslator.yaml_helper import yaml_parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_params as dp  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- cost-table:begin (infra/cost.py --write-doc) -->", "<!-- cost-table:end -->"
# The goals a stage's idle cost is held to (issue: what a hobby service can pay); the stage's
# MonthlyBudgetUsd (samconfig [STAGE-base]) is its AWS Budgets alarm.
SCHEDULED_SECONDS = 0.1  # one idle scheduled run (a sweep that finds nothing), assumed


def condition_true(template, values, expression):
    if isinstance(expression, str):
        return condition_true(template, values, template["Conditions"][expression])
    (name, args), = expression.items()
    if name == "Condition":
        return condition_true(template, values, args)
    if name == "Fn::Equals":
        return str(resolve(values, args[0])) == str(resolve(values, args[1]))
    if name == "Fn::Not":
        return not condition_true(template, values, args[0])
    if name == "Fn::And":
        return all(condition_true(template, values, a) for a in args)
    if name == "Fn::Or":
        return any(condition_true(template, values, a) for a in args)
    raise ValueError(f"condition function {name}")


def resolve(values, value):
    if isinstance(value, dict) and "Ref" in value:
        return values.get(value["Ref"], "")
    return value


def present(template, values):
    """The resources a stack with these parameter values has: {name: resource}."""
    return {name: r for name, r in template["Resources"].items()
            if "Condition" not in r or condition_true(template, values, r["Condition"])}


def pick(template, values, value):
    """A property's value: a literal, a Ref, or an Fn::If on a condition."""
    if isinstance(value, dict) and "Fn::If" in value:
        cond, yes, no = value["Fn::If"]
        return pick(template, values, yes if condition_true(template, values, cond) else no)
    return resolve(values, value)


def alarm_metrics(resource):
    metrics = resource["Properties"].get("Metrics")
    return sum(1 for m in metrics if "MetricStat" in m) if metrics else 1


def per_minute(schedule):
    """Runs a month of a rate() schedule."""
    m = re.fullmatch(r"rate\((\d+) (minute|minutes|hour|hours)\)", schedule.strip())
    if not m:
        raise ValueError(f"schedule {schedule!r}: infra/cost.py reads rate(N minutes|hours)")
    every = int(m.group(1)) * (60 if m.group(2).startswith("hour") else 1)
    return 730 * 60 / every


def lines(base, app, base_values, app_values, prices):
    """[(item, detail, monthly USD)] of one stage at idle."""
    hours = prices["hours_per_month"]
    out = []
    b = present(base, base_values)
    a = present(app, app_values)
    nat = [r for r in b.values() if r["Type"] == "AWS::EC2::NatGateway"]
    if nat:
        out.append(("NAT gateway (callbacks' egress)", "", len(nat) * prices["nat_gateway_hour"] * hours))
    for r in b.values():
        if r["Type"] == "AWS::EC2::Instance":
            kind = pick(base, base_values, r["Properties"]["InstanceType"])
            disk = sum(m["Ebs"]["VolumeSize"] for m in r["Properties"].get("BlockDeviceMappings", []))
            out.append(("NAT instance (callbacks' egress)", f"{kind}, {disk} GiB gp3",
                        prices["ec2_instance_hour"][kind] * hours + disk * prices["ebs_gp3_gb_month"]))
    eips = [r for r in b.values() if r["Type"] == "AWS::EC2::EIP"]
    if eips:
        out.append(("the callbacks' public IPv4 address (Elastic IP)", "", len(eips) * prices["public_ipv4_hour"] * hours))
    endpoint_azs = 0
    for r in b.values():
        props = r["Properties"]
        if r["Type"] == "AWS::EC2::VPCEndpoint" and props.get("VpcEndpointType") == "Interface":
            endpoint_azs += len(pick(base, base_values, props["SubnetIds"]))
    if endpoint_azs:
        out.append(("interface endpoints (SQS, Secrets Manager)", f"{endpoint_azs} endpoint-AZs",
                    endpoint_azs * prices["interface_endpoint_az_hour"] * hours))
    db = b["Database"]["Properties"]
    klass = pick(base, base_values, db["DBInstanceClass"])
    multi_az = pick(base, base_values, db["MultiAZ"]) in (True, "true")
    factor = prices["rds_multi_az_factor"] if multi_az else 1
    if klass not in prices["rds_instance_hour_single_az"]:
        raise ValueError(f"{klass}: no price in the price list (add it)")
    out.append(("PostgreSQL instance", f"{klass}{' Multi-AZ' if multi_az else ''}",
                prices["rds_instance_hour_single_az"][klass] * factor * hours))
    storage = int(pick(base, base_values, db["AllocatedStorage"]))
    out.append(("PostgreSQL gp3 storage", f"{storage} GiB{' x 2 AZs' if multi_az else ''}",
                storage * prices["rds_gp3_gb_month_single_az"] * factor))
    if any(r["Type"] == "AWS::RDS::DBProxy" for r in b.values()):
        # Billed per vCPU of the instance it fronts (a Multi-AZ standby is not one), 2 at least.
        vcpus = max(prices["rds_proxy_min_vcpus"], prices["rds_instance_vcpus"][klass])
        out.append(("RDS Proxy", f"{vcpus} vCPUs", vcpus * prices["rds_proxy_vcpu_hour"] * hours))
    secrets = sum(1 for t in (b, a) for r in t.values() if r["Type"] == "AWS::SecretsManager::Secret")
    out.append(("Secrets Manager secrets", f"{secrets}", secrets * prices["secret_month"]))
    metrics = sum(alarm_metrics(r) for t in (b, a) for r in t.values() if r["Type"] == "AWS::CloudWatch::Alarm")
    out.append(("CloudWatch alarms", f"{metrics} alarm metrics", metrics * prices["cloudwatch_alarm_metric_month"]))
    dashboards = sum(1 for t in (b, a) for r in t.values() if r["Type"] == "AWS::CloudWatch::Dashboard")
    out.append(("CloudWatch dashboards", f"{dashboards}", dashboards * prices["cloudwatch_dashboard_month"]))
    checks = [r for r in a.values() if r["Type"] == "AWS::Route53::HealthCheck"]
    if checks:
        out.append(("Route 53 health check (HTTPS, outside AWS)", "", len(checks) * (
            prices["route53_health_check_non_aws_month"] + prices["route53_health_check_https_month"])))
    runs, gb_seconds = 0.0, 0.0
    memory = app["Globals"]["Function"].get("MemorySize", 128)
    for r in a.values():
        if r["Type"] != "AWS::Serverless::Function":
            continue
        for event in r["Properties"].get("Events", {}).values():
            if event.get("Type") == "Schedule":
                n = per_minute(str(resolve(app_values, event["Properties"]["Schedule"])))
                runs += n
                gb_seconds += n * SCHEDULED_SECONDS * r["Properties"].get("MemorySize", memory) / 1024
    out.append(("scheduled function runs", f"{int(runs)} a month, {SCHEDULED_SECONDS} s each",
                runs / 1e6 * prices["lambda_request_million"] + gb_seconds * prices["lambda_arm64_gb_second"]))
    return out


def stage_values(samconfig, stage):
    """Both stacks' parameter values for a samconfig stage (placeholders for the base's outputs)."""
    base = dp.load_template(os.path.join(ROOT, "infra/base.yaml"))
    app = dp.load_template(os.path.join(ROOT, "template.yaml"))
    base_env = dp.samconfig_env(samconfig, f"{stage}-base")
    base_values = dp.plain(dp.resolve(base, dp.pairs(base_env.get("parameter_overrides")),
                                      {"AvailabilityZoneId1": "use1-az1", "AvailabilityZoneId2": "use1-az2"}))
    app_env = dp.samconfig_env(samconfig, stage)
    outputs = {name: "x" for name in base["Outputs"]}
    outputs.update(CallbackEgress=base_values["CallbackEgress"], CustomDomainName="api.example.com", CertificateArn="x")
    app_values = dp.plain(dp.resolve(app, dp.pairs(app_env.get("parameter_overrides")), outputs))
    return base, app, base_values, app_values


def stages(samconfig):
    import tomlkit
    config = tomlkit.parse(open(samconfig).read()).unwrap()
    return [name for name in config if name != "default" and not name.endswith("-base") and f"{name}-base" in config]


def table(samconfig, prices):
    names = stages(samconfig)
    columns = {}
    budgets = {}
    for stage in names:
        base, app, base_values, app_values = stage_values(samconfig, stage)
        columns[stage] = lines(base, app, base_values, app_values, prices)
        budgets[stage] = float(base_values["MonthlyBudgetUsd"])
    rows = []
    for stage in names:
        for item, _, _ in columns[stage]:
            if item not in rows:
                rows.append(item)
    head = f"| idle, USD/month ({prices['region']}, list prices of {prices['date']}) | " + " | ".join(names) + " |"
    out = [head, "| --- | " + " | ".join("---:" for _ in names) + " |"]
    for item in rows:
        cells = []
        for stage in names:
            found = [(detail, cost) for i, detail, cost in columns[stage] if i == item]
            cells.append(f"{found[0][1]:.2f}" + (f" ({found[0][0]})" if found[0][0] else "") if found else "-")
        out.append(f"| {item} | " + " | ".join(cells) + " |")
    totals = {s: sum(c for _, _, c in columns[s]) for s in names}
    out.append("| **total** | " + " | ".join(f"**{totals[s]:.2f}**" for s in names) + " |")
    out.append("| AWS Budgets alarm (MonthlyBudgetUsd) | " + " | ".join(f"{budgets[s]:.2f}" for s in names) + " |")
    return "\n".join(out) + "\n", totals, budgets


def load_prices(region):
    return json.load(open(os.path.join(ROOT, f"infra/prices-{region}.json")))


def main(argv):
    parser = argparse.ArgumentParser(prog="cost.py")
    parser.add_argument("--samconfig", default=os.path.join(ROOT, "samconfig.toml"))
    parser.add_argument("--table", action="store_true")
    parser.add_argument("--check-doc")
    parser.add_argument("--write-doc")
    parser.add_argument("--stage")
    parser.add_argument("--base-values")
    parser.add_argument("--app-values")
    args = parser.parse_args(argv)
    region = dp.samconfig_env(args.samconfig, "dev")["region"]
    prices = load_prices(region)
    if args.stage:
        base = dp.load_template(os.path.join(ROOT, "infra/base.yaml"))
        app = dp.load_template(os.path.join(ROOT, "template.yaml"))
        base_values = {k: str(v) for k, v in yaml.safe_load(open(args.base_values)).items()}
        app_values = {k: str(v) for k, v in yaml.safe_load(open(args.app_values)).items()}
        items = lines(base, app, base_values, app_values, prices)
        print(f"  idle cost of {args.stage} ({prices['region']} list prices of {prices['date']}, infra/prices-{region}.json):")
        for item, detail, cost in items:
            print(f"    {cost:8.2f}  {item}" + (f" ({detail})" if detail else ""))
        total, budget = sum(c for _, _, c in items), float(base_values["MonthlyBudgetUsd"])
        print(f"    {total:8.2f}  USD/month before any traffic; AWS Budgets alarm at {budget:.2f} (MonthlyBudgetUsd)")
        if total > budget:
            print(f"  warning: idle alone is over the budget: the alarm fires every month", file=sys.stderr)
        return 0
    text, totals, budgets = table(args.samconfig, prices)
    if args.table:
        print(text, end="")
    for path in [p for p in (args.check_doc, args.write_doc) if p]:
        doc = open(path).read()
        if BEGIN not in doc or END not in doc:
            print(f"cost.py: {path} has no {BEGIN} ... {END} markers", file=sys.stderr)
            return 1
        head, rest = doc.split(BEGIN, 1)
        current, tail = rest.split(END, 1)
        wanted = "\n" + text
        if args.write_doc:
            open(path, "w").write(head + BEGIN + wanted + END + tail)
        elif current != wanted:
            print(f"cost.py: {path}'s idle-cost table differs from the templates and infra/prices-{region}.json; "
                  f"run infra/cost.py --write-doc {os.path.relpath(path, ROOT)}\n--- in the doc\n{current}--- computed\n{wanted}",
                  file=sys.stderr)
            return 1
    # A stage whose idle cost alone is over its budget would alarm every month: refused.
    over = [f"{stage} costs {total:.2f} idle, over its MonthlyBudgetUsd {budgets[stage]:.2f}"
            for stage, total in totals.items() if total > budgets[stage]]
    for line in over:
        print(f"cost.py: {line}", file=sys.stderr)
    return 1 if over and (args.check_doc or args.write_doc) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
