"""The AWS calls of infra/deploy (boto3, from the deploy venv: no AWS CLI needed to deploy).

    python infra/deploy_aws.py --region R COMMAND [ARGS]

    identity                          who is deploying (account, principal)
    describe STACK OUT.json           describe-stacks of STACK into OUT.json ({} when it does not exist)
    settle STACK                      wait while STACK is busy (*_IN_PROGRESS, another deploy's)
    clear-failed-create STACK         a stack whose first create failed (ROLLBACK_COMPLETE) is
                                      deleted, after printing why it failed; other dead ends stop
    why STACK                         the failure reasons of STACK's latest operation
    pick-azs EXCLUDED...              two AZ ids of the region, none of EXCLUDED
    account-ready [--check-only] RESERVED
                                      Lambda's unreserved concurrency stays >= 100 after RESERVED;
                                      API Gateway has its CloudWatch Logs role (made if missing,
                                      unless --check-only: then only said)
    wait-proxy STACK [SECONDS]        the RDS Proxy of base stack STACK has every target AVAILABLE
    outputs STACK                     STACK's outputs as Key=Value lines
    secret ARN                        a secret's SecretString, on stdout
    caller-ip                         this machine's public IPv4 address (checkip.amazonaws.com)

Exit status 1 with a message on stderr saying what to do, on anything that stops the deploy.
"""
import json
import sys
import time
import urllib.request

import boto3
from botocore.exceptions import ClientError

# A role infra/deploy makes once per account when API Gateway has none: the API stage's access
# logs need it, and API Gateway refuses a stage with access logging until the account has it.
APIGATEWAY_LOGS_ROLE = "osurender-apigateway-cloudwatch-logs"


class Stop(Exception):
    pass


def status(cf, stack):
    try:
        return cf.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"]
    except ClientError as error:
        if "does not exist" in str(error):
            return None
        raise


def settle(cf, stack, timeout=3600):
    deadline = time.time() + timeout
    state = status(cf, stack)
    while state and state.endswith("_IN_PROGRESS"):
        if time.time() > deadline:
            raise Stop(f"{stack} is still {state} after {timeout} s")
        print(f"  {stack}: {state}, waiting", file=sys.stderr)
        time.sleep(15)
        state = status(cf, stack)
    return state


def why(cf, stack, limit=10):
    """The failure reasons of the stack's latest operation (newest first, at most `limit`)."""
    reasons = []
    try:
        pages = cf.get_paginator("describe_stack_events").paginate(StackName=stack)
        for page in pages:
            for event in page["StackEvents"]:
                state = event.get("ResourceStatus", "")
                if state.endswith("_FAILED") and event.get("ResourceStatusReason"):
                    reasons.append(f"{event['LogicalResourceId']} ({event.get('ResourceType')}): "
                                   f"{state}: {event['ResourceStatusReason']}")
                if event["LogicalResourceId"] == stack and state in ("CREATE_IN_PROGRESS", "UPDATE_IN_PROGRESS"):
                    return reasons[:limit]  # the start of the latest operation
                if len(reasons) >= limit:
                    return reasons
    except ClientError:
        pass
    return reasons


def clear_failed_create(cf, stack):
    state = settle(cf, stack)
    if state == "ROLLBACK_COMPLETE":
        print(f"  {stack} is ROLLBACK_COMPLETE: its first create failed, and CloudFormation can only delete it now.", file=sys.stderr)
        for reason in why(cf, stack):
            print(f"    {reason}", file=sys.stderr)
        print(f"  deleting {stack} (nothing of it was kept) so that this deploy can create it afresh", file=sys.stderr)
        cf.delete_stack(StackName=stack)
        cf.get_waiter("stack_delete_complete").wait(StackName=stack, WaiterConfig={"Delay": 10, "MaxAttempts": 360})
        return None
    if state in ("ROLLBACK_FAILED", "DELETE_FAILED"):
        reasons = "\n    ".join(why(cf, stack))
        raise Stop(f"{stack} is {state}: a resource could not be deleted:\n    {reasons}\n"
                   f"  Remove what blocks it (docs/DEPLOY.md, 'When a step fails'), then "
                   f"`aws cloudformation delete-stack --stack-name {stack}` and deploy again.")
    if state == "UPDATE_ROLLBACK_FAILED":
        raise Stop(f"{stack} is UPDATE_ROLLBACK_FAILED. Fix what the events name, then\n"
                   f"  aws cloudformation continue-update-rollback --stack-name {stack}\n"
                   f"  (docs/DEPLOY.md, 'When a step fails'), and deploy again.")
    return state


def pick_azs(ec2, excluded):
    zones = ec2.describe_availability_zones(Filters=[
        {"Name": "state", "Values": ["available"]}, {"Name": "zone-type", "Values": ["availability-zone"]}])
    ids = sorted(z["ZoneId"] for z in zones["AvailabilityZones"] if z["ZoneId"] not in excluded)
    if len(ids) < 2:
        raise Stop(f"fewer than two AZs with RDS Proxy in this region: {ids}")
    return ids[:2]


def account_ready(session, reserved, check_only=False):
    limit = session.client("lambda").get_account_settings()["AccountLimit"]["ConcurrentExecutions"]
    if limit - reserved < 100:
        raise Stop(
            f"Lambda's concurrency limit here is {limit}; the stack reserves {reserved} and Lambda keeps 100 "
            f"unreserved, so CloudFormation would fail the functions. Ask for more (it takes hours to days):\n"
            f"  aws service-quotas request-service-quota-increase --service-code lambda "
            f"--quota-code L-B99A9384 --desired-value 1000")
    print(f"  Lambda concurrency: limit {limit}, reserved by the stack {reserved}")
    apigw, iam = session.client("apigateway"), session.client("iam")
    role_arn = apigw.get_account().get("cloudwatchRoleArn")
    if role_arn:
        try:
            iam.get_role(RoleName=role_arn.rsplit("/", 1)[-1])
            print(f"  API Gateway's CloudWatch Logs role: {role_arn}")
            return
        except ClientError:
            print(f"  API Gateway's CloudWatch Logs role {role_arn} no longer exists: replacing it")
    if check_only:
        print(f"  API Gateway has no CloudWatch Logs role: a deploy makes {APIGATEWAY_LOGS_ROLE}")
        return
    try:
        role = iam.get_role(RoleName=APIGATEWAY_LOGS_ROLE)["Role"]
    except ClientError:
        role = iam.create_role(
            RoleName=APIGATEWAY_LOGS_ROLE,
            Description="API Gateway writes the access logs of its stages (account setting; made by osurender's infra/deploy)",
            AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [{
                "Effect": "Allow", "Principal": {"Service": "apigateway.amazonaws.com"}, "Action": "sts:AssumeRole"}]}),
        )["Role"]
        iam.attach_role_policy(RoleName=APIGATEWAY_LOGS_ROLE,
                               PolicyArn="arn:aws:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs")
        print(f"  made {APIGATEWAY_LOGS_ROLE}")
    for attempt in range(12):  # a new role takes a few seconds to be usable
        try:
            apigw.update_account(patchOperations=[{"op": "replace", "path": "/cloudwatchRoleArn", "value": role["Arn"]}])
            print(f"  API Gateway's CloudWatch Logs role: {role['Arn']}")
            return
        except ClientError as error:
            if attempt == 11:
                raise Stop(f"API Gateway refused its CloudWatch Logs role: {error}")
            time.sleep(5)


def physical_id(cf, stack, logical):
    return cf.describe_stack_resource(StackName=stack, LogicalResourceId=logical)["StackResourceDetail"]["PhysicalResourceId"]


def wait_proxy(session, stack, timeout):
    """CloudFormation finishes the proxy's target group while its target is still registering;
    a connection before it is AVAILABLE fails (and migrate, the first, would fail the deploy).
    Waits while the target is registering or the proxy is scaling up; AVAILABLE goes on.
    UNAVAILABLE for AUTH_FAILURE goes on too, with a warning: on a first deploy the application
    role (one of the proxy's two secrets) does not exist until migrate makes it; if it is the
    master's, migrate fails with the reason. Any other UNAVAILABLE stops the deploy."""
    proxy = physical_id(session.client("cloudformation"), stack, "DbProxy")
    rds = session.client("rds")
    deadline, last = time.time() + timeout, None
    while True:
        targets = rds.describe_db_proxy_targets(DBProxyName=proxy)["Targets"]
        health = [t.get("TargetHealth", {}) for t in targets if t.get("Type") == "RDS_INSTANCE"]
        states = [h.get("State", "?") for h in health]
        detail = "; ".join(f"{h.get('State')} {h.get('Reason', '')} {h.get('Description', '')}".strip() for h in health)
        if states != last:
            print(f"  {proxy}: target {detail or 'none yet'}")
            last = states
        if health and all(s == "AVAILABLE" for s in states):
            return
        if health and all(s == "UNAVAILABLE" for s in states):
            if all(h.get("Reason") == "AUTH_FAILURE" for h in health):
                print(f"  warning: {proxy} cannot log in with one of its secrets. On a first deploy that is the "
                      f"application role, which migrate creates next; otherwise see docs/DEPLOY.md, 'When a step fails'.")
                return
            raise Stop(f"{proxy}'s target is UNAVAILABLE: {detail}.\n  CONNECTION_FAILED: the proxy's or the "
                       f"database's security group, or the database is down (docs/DEPLOY.md, 'When a step fails').")
        if time.time() > deadline:
            raise Stop(f"{proxy}'s target is not AVAILABLE after {timeout} s: {detail or 'no target'}")
        time.sleep(15)


def main(argv):
    region = None
    if argv[:1] == ["--region"]:
        region, argv = argv[1], argv[2:]
    session = boto3.Session(region_name=region)
    cf = session.client("cloudformation")
    command, args = argv[0], argv[1:]
    try:
        if command == "identity":
            me = session.client("sts").get_caller_identity()
            print(f"account {me['Account']} as {me['Arn']} in {session.region_name}")
        elif command == "describe":
            stack, out = args
            try:
                described = cf.describe_stacks(StackName=stack)
            except ClientError as error:
                if "does not exist" not in str(error):
                    raise
                described = {}
            json.dump(described, open(out, "w"), default=str)
        elif command == "settle":
            print(settle(cf, args[0]) or "NONE")
        elif command == "clear-failed-create":
            print(clear_failed_create(cf, args[0]) or "NONE")
        elif command == "why":
            for reason in why(cf, args[0]):
                print(f"    {reason}")
        elif command == "pick-azs":
            print(" ".join(pick_azs(session.client("ec2"), set(args))))
        elif command == "account-ready":
            account_ready(session, int(args[-1]), check_only="--check-only" in args)
        elif command == "wait-proxy":
            wait_proxy(session, args[0], int(args[1]) if len(args) > 1 else 1200)
        elif command == "outputs":
            for output in cf.describe_stacks(StackName=args[0])["Stacks"][0].get("Outputs", []):
                print(f"{output['OutputKey']}={output.get('OutputValue', '')}")
        elif command == "secret":
            print(session.client("secretsmanager").get_secret_value(SecretId=args[0])["SecretString"])
        elif command == "caller-ip":
            with urllib.request.urlopen("https://checkip.amazonaws.com", timeout=10) as answer:
                print(answer.read().decode().strip())
        else:
            raise Stop(f"unknown command {command}")
    except Stop as error:
        print(f"deploy: {error}", file=sys.stderr)
        return 1
    except ClientError as error:
        print(f"deploy: AWS said: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # the network: an endpoint, checkip
        print(f"deploy: {command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
