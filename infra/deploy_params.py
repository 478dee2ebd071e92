"""The parameters infra/deploy passes to a stack, every one of them, and the checks before it does.

    python infra/deploy_params.py config --samconfig S --env E        # "stack_name region"
    python infra/deploy_params.py resolve --template T --samconfig S --env E --stage STAGE \
        [--existing stack.json] [--computed K=V ...] [--override K=V ...] --out params.yaml
    python infra/deploy_params.py budget --app-template T --app-values app.yaml --base-values base.yaml

`sam deploy --parameter-overrides` replaces samconfig's whole `parameter_overrides` list, so a
hand-made `--parameter-overrides X=1` on a prod deploy would silently drop `Stage=prod` (and
the template default, `dev`, would win). infra/deploy never passes a partial list: it resolves
every parameter of the template, by precedence,

    1. --override (infra/deploy's own --parameter-overrides / --base-parameter-overrides),
    2. --computed (the base stack's outputs, the dev caller's address: what infra/deploy knows),
    3. samconfig.toml's `parameter_overrides` of the environment,
    4. for a parameter without a default only: the stack's current value (the AZ ids picked on
       the first deploy, kept so that subnets never move),
    5. the template's default,

and writes them all to a YAML file that `sam deploy --parameter-overrides file://….yaml` reads
(SAM CLI 1.170 reads .toml and .yaml parameter files; every value written as a quoted string). A
parameter that ends up with no value stops the deploy, naming it; so does a Stage other than
the one infra/deploy was asked to deploy. NoEcho parameters are never read back from a stack
(CloudFormation shows them as ****): without a value of their own they are left out, and SAM
keeps the previous value.

Uses only the standard library and tomlkit (which the SAM CLI brings), so the deploy venv's
Python runs it.
"""
import argparse
import json
import math
import sys

import tomlkit
import yaml
from samtranslator.yaml_helper import yaml_parse

# Postgres functions' reserved-concurrency parameters (template.yaml), and the fixed singletons'.
CONCURRENCY = {
    "RenderFunction": "RenderReservedConcurrency",
    "JobsFunction": "JobsReservedConcurrency",
    "SkinsFunction": "SkinsReservedConcurrency",
    "SkinsUploadFunction": "SkinsUploadReservedConcurrency",
    "LegacySkinsUploadFunction": "SkinsUploadReservedConcurrency",
    "JobWebhookFunction": "JobWebhookReservedConcurrency",
    "SkinIngestFunction": "SkinIngestReservedConcurrency",
    "EventsFunction": "EventsReservedConcurrency",
}


# Base parameters whose change replaces the database: CloudFormation would make a new, empty
# instance (and the stack policy infra/deploy sets then fails the update). Refused up front.
REPLACING = {
    "DbName": "the database's name is fixed at its creation, so CloudFormation would replace the "
              "instance with a new, empty one",
    "DbSnapshotIdentifier": "a database is restored from a snapshot only when it is created, so "
                            "CloudFormation would replace the instance",
}


class DeployError(Exception):
    pass


def load_template(path):
    return yaml_parse(open(path).read())


def samconfig_env(path, env):
    """An environment's `global` and `deploy` parameters from samconfig.toml (plain dicts)."""
    config = tomlkit.parse(open(path).read()).unwrap()
    if env not in config:
        raise DeployError(f"samconfig.toml has no [{env}.*] environment")
    section = config[env]
    merged = dict(section.get("global", {}).get("parameters", {}))
    merged.update(section.get("deploy", {}).get("parameters", {}))
    return merged


def pairs(items):
    """["K=V", ...] (samconfig's list, or a string of them) to a dict; a value keeps its '='s."""
    if isinstance(items, str):
        items = items.split()
    out = {}
    for item in items or []:
        key, sep, value = str(item).partition("=")
        if not sep or not key:
            raise DeployError(f"not Key=Value: {item!r}")
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        out[key] = value
    return out


def resolve(template, samconfig_overrides, computed=None, overrides=None, existing=None, stage=None):
    """Every parameter's value and where it came from: {name: (value, source)}."""
    params = template.get("Parameters", {})
    computed, overrides, existing = computed or {}, overrides or {}, existing or {}
    unknown = sorted(set(overrides) - set(params))
    if unknown:
        raise DeployError(f"--parameter-overrides names parameters the template does not have: {', '.join(unknown)}")
    unknown = sorted(set(samconfig_overrides) - set(params))
    if unknown:
        raise DeployError(f"samconfig.toml's parameter_overrides names unknown parameters: {', '.join(unknown)}")
    values, missing = {}, []
    for name, spec in params.items():
        if name in overrides:
            values[name] = (overrides[name], "override")
        elif name in computed:
            values[name] = (computed[name], "computed")
        elif name in samconfig_overrides:
            values[name] = (samconfig_overrides[name], "samconfig")
        elif "Default" not in spec and name in existing and not spec.get("NoEcho"):
            values[name] = (existing[name], "stack")
        elif "Default" in spec:
            values[name] = (str(spec["Default"]), "default")
        elif spec.get("NoEcho") and name in existing:
            continue  # SAM keeps the previous value
        else:
            missing.append(name)
    if stage is not None and "Stage" in params and values.get("Stage", (stage,))[0] != stage:
        got, source = values["Stage"]
        raise DeployError(f"Stage would be {got!r} ({source}), not {stage!r}: refused")
    if missing:
        raise DeployError(f"no value for {', '.join(missing)} (pass --parameter-overrides {missing[0]}=...)")
    for name, why in REPLACING.items():
        if name in params and name in existing and name in values and values[name][0] != existing[name]:
            raise DeployError(f"{name} would change from {existing[name]!r} to {values[name][0]!r} "
                              f"({values[name][1]}): {why}. Refused (docs/DEPLOY.md, 'Restore' to move data).")
    if "DbEngineVersion" in existing and "DbEngineVersion" in values:
        old, new = existing["DbEngineVersion"], values["DbEngineVersion"][0]
        if old.isdigit() and new.isdigit() and int(new) < int(old):
            raise DeployError(f"DbEngineVersion {old} to {new}: RDS cannot downgrade PostgreSQL. Refused.")
    for name, (value, source) in values.items():
        spec = params[name]
        allowed = spec.get("AllowedValues")
        if allowed is not None and value not in [str(a) for a in allowed]:
            raise DeployError(f"{name}={value!r} ({source}) is not one of {allowed}")
    return values


def evaluate(expression, values, region):
    """A Rules expression (Fn::Equals, Not, And, Or, Contains, Ref) over resolved values."""
    if isinstance(expression, dict) and len(expression) == 1:
        (name, args), = expression.items()
        if name == "Ref":
            return region if args == "AWS::Region" else values[args]
        if name == "Fn::Equals":
            return str(evaluate(args[0], values, region)) == str(evaluate(args[1], values, region))
        if name == "Fn::Not":
            return not evaluate(args[0], values, region)
        if name == "Fn::And":
            return all(evaluate(a, values, region) for a in args)
        if name == "Fn::Or":
            return any(evaluate(a, values, region) for a in args)
        if name == "Fn::Contains":
            return str(evaluate(args[1], values, region)) in [str(evaluate(a, values, region)) for a in args[0]]
        raise DeployError(f"a rule uses {name}, which deploy_params.py cannot evaluate")
    if isinstance(expression, list):
        return [evaluate(e, values, region) for e in expression]
    return expression


def check_rules(template, values, region=None):
    """The template's Rules, as CloudFormation will check them, before anything is deployed."""
    plain_values = plain(values)
    for name, rule in template.get("Rules", {}).items():
        condition = rule.get("RuleCondition")
        if condition is not None and not evaluate(condition, plain_values, region):
            continue
        for assertion in rule.get("Assertions", []):
            if not evaluate(assertion["Assert"], plain_values, region):
                raise DeployError(f"rule {name}: {assertion.get('AssertDescription', 'fails')}")


def reserved(app_template, app_values):
    """Reserved concurrency of every function, summed (what the account's Lambda limit must hold)."""
    total = 0
    for resource in app_template["Resources"].values():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        value = resource.get("Properties", {}).get("ReservedConcurrentExecutions", 0)
        total += int(app_values[value["Ref"]] if isinstance(value, dict) else value)
    return total


def pool_size(props, pool):
    """A function's Postgres connections per instance: its own literal DB_POOL_SIZE (events: 1),
    else DbPoolSize's `pool`."""
    own = props.get("Environment", {}).get("Variables", {}).get("DB_POOL_SIZE")
    return int(own) if isinstance(own, (int, str)) else pool


def connections(app_template, app_values):
    """Connections the Postgres functions may open: reserved concurrency x pool size (DbPoolSize,
    or the function's own DB_POOL_SIZE), summed."""
    pool = int(app_values["DbPoolSize"])
    total = 0
    for name, resource in app_template["Resources"].items():
        props = resource.get("Properties", {})
        if resource.get("Type") != "AWS::Serverless::Function" or "VpcConfig" not in props:
            continue
        reserved = props.get("ReservedConcurrentExecutions")
        if isinstance(reserved, dict):
            reserved = app_values[reserved["Ref"]]
        total += int(reserved) * pool_size(props, pool)
    return total


def budget(base_values):
    """What the RDS Proxy may open to the database: ProxyMaxConnectionsPercent of max_connections."""
    return math.floor(int(base_values["DbMaxConnections"]) * int(base_values["ProxyMaxConnectionsPercent"]) / 100)


def check_budget(app_template, app_values, base_values):
    asked, allowed = connections(app_template, app_values), budget(base_values)
    if asked > allowed:
        raise DeployError(
            f"the functions may open {asked} connections (reserved concurrency x DbPoolSize {app_values['DbPoolSize']}), "
            f"the proxy {allowed} (DbMaxConnections {base_values['DbMaxConnections']} x "
            f"ProxyMaxConnectionsPercent {base_values['ProxyMaxConnectionsPercent']} %): lower a reserved "
            f"concurrency or DbPoolSize, or raise DbMaxConnections (a larger DbInstanceClass)")
    return asked, allowed


def stack_parameters(described):
    """A describe-stacks answer's parameter values ({} for a stack that does not exist)."""
    stacks = described.get("Stacks") or [{}]
    return {p["ParameterKey"]: p.get("ParameterValue", "") for p in stacks[0].get("Parameters", [])}


def plain(values):
    return {name: value for name, (value, _) in values.items()}


def write(values, path):
    """The file for `sam deploy --parameter-overrides file://PATH` (PATH ending in .yaml)."""
    if not path.endswith(".yaml"):
        raise DeployError(f"{path}: the SAM CLI reads parameter files ending in .yaml (or .toml)")
    with open(path, "w") as f:
        yaml.safe_dump(plain(values), f, default_style='"', sort_keys=True, width=1 << 16)


def main(argv):
    parser = argparse.ArgumentParser(prog="deploy_params.py")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("resolve")
    r.add_argument("--template", required=True)
    r.add_argument("--samconfig", required=True)
    r.add_argument("--env", required=True)
    r.add_argument("--stage")
    r.add_argument("--existing", help="describe-stacks JSON of the stack, if it exists")
    r.add_argument("--computed", nargs="*", default=[])
    r.add_argument("--override", nargs="*", default=[])
    r.add_argument("--out", required=True)
    b = sub.add_parser("budget")
    b.add_argument("--app-template", required=True)
    b.add_argument("--app-values", required=True)
    b.add_argument("--base-values", required=True)
    c = sub.add_parser("config")
    c.add_argument("--samconfig", required=True)
    c.add_argument("--env", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "config":
            env = samconfig_env(args.samconfig, args.env)
            if not env.get("stack_name") or not env.get("region"):
                raise DeployError(f"samconfig.toml [{args.env}]: stack_name and region are needed")
            print(env["stack_name"], env["region"])
        elif args.command == "resolve":
            template = load_template(args.template)
            env = samconfig_env(args.samconfig, args.env)
            existing = stack_parameters(json.load(open(args.existing))) if args.existing else {}
            values = resolve(template, pairs(env.get("parameter_overrides")), pairs(args.computed),
                             pairs(args.override), existing, args.stage)
            check_rules(template, values, env.get("region"))
            write(values, args.out)
            params = template.get("Parameters", {})
            for name, (value, source) in sorted(values.items()):
                shown = "****" if params[name].get("NoEcho") and value else value
                print(f"  {name} = {shown}   ({source})")
        elif args.command == "budget":
            app = load_template(args.app_template)
            app_values, base_values = yaml.safe_load(open(args.app_values)), yaml.safe_load(open(args.base_values))
            asked, allowed = check_budget(app, app_values, base_values)
            print(f"  connections: the functions may open {asked}, the proxy {allowed}", file=sys.stderr)
            print(reserved(app, app_values))
    except DeployError as error:
        print(f"deploy_params: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
