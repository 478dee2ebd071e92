"""The AWS calls of infra/deploy (boto3, from the deploy venv: no AWS CLI needed to deploy).

    python infra/deploy_aws.py --region R COMMAND [ARGS]

    identity                          who is deploying (account, principal)
    describe STACK OUT.json           describe-stacks of STACK into OUT.json ({} when it does not exist)
    settle STACK                      wait while STACK is busy (*_IN_PROGRESS, another deploy's;
                                      never REVIEW_IN_PROGRESS, which waits for nobody)
    clear-failed-create STACK         a stack whose first create failed (ROLLBACK_COMPLETE) or
                                      never started (REVIEW_IN_PROGRESS: its first change set was
                                      refused or declined) is deleted, saying why; other dead
                                      ends stop
    deployed STACK SINCE              after `sam deploy` exited 0: the stack is *_COMPLETE and no
                                      change set made since SINCE (epoch seconds) waits
                                      unexecuted; a declined change set stops, saying so
    leftovers STAGE                   before a stage's first create: what a deleted stage left
                                      under the names the new one needs (its bucket)
    protect STACK                     the base stack's policy: no update may replace Database
    alarm-email STACK                 the alarm topic's e-mail subscription is confirmed, or
                                      said loudly (prints CONFIRMED, PENDING or NONE)
    why STACK                         the failure reasons of STACK's latest operation
    pick-azs EXCLUDED...              two AZ ids of the region, none of EXCLUDED
    account-ready [--check-only] RESERVED [APP_STACK]
                                      Lambda's unreserved concurrency stays >= 100 after RESERVED
                                      (what every other stack, the other stage's too, reserves
                                      counted; APP_STACK's own current reservations replaced);
                                      API Gateway has its CloudWatch Logs role (made if missing,
                                      unless --check-only: then only said)
    wait-proxy STACK [SECONDS] [--first]
                                      the RDS Proxy of base stack STACK has every target
                                      AVAILABLE; waits through REGISTERING and UNAVAILABLE,
                                      stops on AUTH_FAILURE with the proxy's reason
    outputs STACK                     STACK's outputs as Key=Value lines
    secret ARN                        a secret's SecretString, on stdout
    smoke-key STACK FILE              a sandbox API key (osr_test_) for infra/smoke: FILE's, or
                                      one made once through the admin function and kept there
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
    # REVIEW_IN_PROGRESS: a change set made, never executed; nothing is running to wait for.
    while state and state.endswith("_IN_PROGRESS") and state != "REVIEW_IN_PROGRESS":
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
    if state == "REVIEW_IN_PROGRESS":
        print(f"  {stack} is REVIEW_IN_PROGRESS: its first change set was refused or declined, and it "
              f"holds no resources.", file=sys.stderr)
        print(f"  deleting {stack} so that this deploy can create it afresh", file=sys.stderr)
        cf.delete_stack(StackName=stack)
        cf.get_waiter("stack_delete_complete").wait(StackName=stack, WaiterConfig={"Delay": 5, "MaxAttempts": 120})
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


def deployed(cf, stack, since):
    """After `sam deploy` exited 0 (it does so when its change set is declined): the stack
    finished an operation, and no change set made since `since` waits unexecuted."""
    state = status(cf, stack)
    waiting = []
    if state is not None:
        for page in cf.get_paginator("list_change_sets").paginate(StackName=stack):
            for summary in page.get("Summaries", []):
                made = summary.get("CreationTime")
                made = made.timestamp() if hasattr(made, "timestamp") else float(made or 0)
                if made >= since and summary.get("ExecutionStatus") == "AVAILABLE":
                    waiting.append(summary.get("ChangeSetName", "?"))
    if state == "REVIEW_IN_PROGRESS" or waiting:
        raise Stop(f"the change set of {stack} was declined (or left unexecuted: {', '.join(waiting) or state}); "
                   f"nothing was deployed. Run infra/deploy again and answer y to deploy it.")
    # UPDATE_ROLLBACK_COMPLETE passes: sam deploy would have failed on a rollback of its own, so
    # this is an earlier one's, and this run had nothing to change.
    if state is None or not state.endswith("_COMPLETE") or state in ("ROLLBACK_COMPLETE", "DELETE_COMPLETE"):
        raise Stop(f"{stack} is {state or 'missing'} after sam deploy: not deployed")
    return state


def bucket_name(stage, account, region):
    """template.yaml's Bucket name."""
    return f"osurender-{stage}-{account}-{region}"


def leftovers(session, stage):
    """What a deleted stage left under the names its next create needs: the bucket, kept by
    its DeletionPolicy (RetainExceptOnCreate) with its skins and renders."""
    account = session.client("sts").get_caller_identity()["Account"]
    name = bucket_name(stage, account, session.region_name)
    try:
        session.client("s3").head_bucket(Bucket=name, ExpectedBucketOwner=account)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchBucket", "NotFound"):
            return []
        raise
    return [name]


# The base stack's policy: an update that would replace the database (DbName, a changed
# instance identifier) would make a new, empty one; CloudFormation refuses it instead.
STACK_POLICY = {"Statement": [
    {"Effect": "Allow", "Action": "Update:*", "Principal": "*", "Resource": "*"},
    {"Effect": "Deny", "Action": "Update:Replace", "Principal": "*", "Resource": "LogicalResourceId/Database"},
]}


def protect(cf, stack):
    cf.set_stack_policy(StackName=stack, StackPolicyBody=json.dumps(STACK_POLICY))


def alarm_email(session, stack):
    """The alarm topic's e-mail subscription: CONFIRMED, PENDING (SNS mailed a link nobody has
    followed yet: alarms reach no one) or NONE (no AlarmEmail)."""
    cf = session.client("cloudformation")
    topic = next((o["OutputValue"] for o in cf.describe_stacks(StackName=stack)["Stacks"][0].get("Outputs", [])
                  if o["OutputKey"] == "AlarmTopicArn"), None)
    subscriptions = []
    for page in session.client("sns").get_paginator("list_subscriptions_by_topic").paginate(TopicArn=topic):
        subscriptions += [s for s in page.get("Subscriptions", []) if s.get("Protocol") == "email"]
    if not subscriptions:
        return "NONE", []
    pending = [s["Endpoint"] for s in subscriptions if s.get("SubscriptionArn") in ("PendingConfirmation", "pending confirmation")]
    return ("PENDING" if pending else "CONFIRMED"), pending


def smoke_key(session, stack, path):
    """The sandbox key infra/smoke renders with: a sandbox job is simulated, never rendered,
    and counts toward no queue limit (docs/API.md, "API keys")."""
    try:
        key = open(path).read().strip()
        if key.startswith("osr_test_"):
            return key
    except FileNotFoundError:
        pass
    function = physical_id(session.client("cloudformation"), stack, "AdminFunction")
    answer = session.client("lambda").invoke(FunctionName=function, Payload=json.dumps(
        {"command": ["keys", "create", "--sandbox", "--name", "infra/deploy smoke test"]}).encode())
    body = json.loads(answer["Payload"].read() or b"{}")
    key = body.get("key", "") if isinstance(body, dict) else ""
    if answer.get("FunctionError") or not key.startswith("osr_test_"):
        raise Stop(f"the admin function made no sandbox key: {str(body)[:300]}")
    import os
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(key + "\n")
    print(f"  made a sandbox key for infra/smoke, kept in {path}", file=sys.stderr)
    return key


def pick_azs(ec2, excluded):
    zones = ec2.describe_availability_zones(Filters=[
        {"Name": "state", "Values": ["available"]}, {"Name": "zone-type", "Values": ["availability-zone"]}])
    ids = sorted(z["ZoneId"] for z in zones["AvailabilityZones"] if z["ZoneId"] not in excluded)
    if len(ids) < 2:
        raise Stop(f"fewer than two AZs with RDS Proxy in this region: {ids}")
    return ids[:2]


def own_reservations(session, app_stack):
    """Reserved concurrency the app stack's functions hold now (0 before its first create)."""
    if not app_stack:
        return 0
    cf, lam = session.client("cloudformation"), session.client("lambda")
    total = 0
    try:
        pages = cf.get_paginator("list_stack_resources").paginate(StackName=app_stack)
        for page in pages:
            for r in page["StackResourceSummaries"]:
                if r["ResourceType"] == "AWS::Lambda::Function" and r.get("PhysicalResourceId"):
                    total += lam.get_function_concurrency(FunctionName=r["PhysicalResourceId"]).get(
                        "ReservedConcurrentExecutions", 0)
    except ClientError as error:
        if "does not exist" not in str(error):
            raise
    return total


def concurrency_left(settings, reserved, own):
    """Unreserved concurrency after this deploy: what every other function in the account and
    region (the other stage's too) reserves stays reserved; this stack's own `own` is replaced
    by `reserved`."""
    limit = settings["AccountLimit"]["ConcurrentExecutions"]
    unreserved = settings["AccountLimit"].get("UnreservedConcurrentExecutions", limit)
    others = limit - unreserved - own
    return limit, others, limit - others - reserved


def account_ready(session, reserved, check_only=False, app_stack=None):
    settings = session.client("lambda").get_account_settings()
    limit, others, left = concurrency_left(settings, reserved, own_reservations(session, app_stack))
    if left < 100:
        raise Stop(
            f"Lambda's concurrency limit here is {limit}; other functions (another stage's too) reserve {others}, "
            f"this stack {reserved}, and Lambda keeps 100 unreserved, so CloudFormation would fail the functions. "
            f"Ask for more (it takes hours to days):\n"
            f"  aws service-quotas request-service-quota-increase --service-code lambda "
            f"--quota-code L-B99A9384 --desired-value 1000")
    print(f"  Lambda concurrency: limit {limit}, reserved by others {others}, by this stack {reserved}, {left} left unreserved")
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


# Reasons an UNAVAILABLE target does not recover from by itself: stop with the proxy's words.
# The rest (UNREACHABLE, CONNECTION_FAILED, PENDING_PROXY_CAPACITY, none) are what a new
# target passes through (registering > unavailable > available): waited through.
FATAL_REASONS = {"AUTH_FAILURE", "INVALID_REPLICATION_STATE"}


def proxy_verdict(health, first_deploy=False):
    """What one look at the targets' health means: ("done"|"wait"|"stop", message)."""
    states = [h.get("State", "?") for h in health]
    if health and all(s == "AVAILABLE" for s in states):
        return "done", ""
    for h in health:
        reason = h.get("Reason", "")
        if h.get("State") == "UNAVAILABLE" and reason in FATAL_REASONS:
            detail = f"{reason}: {h.get('Description', '')}".strip()
            if reason == "AUTH_FAILURE":
                return "stop", (f"the proxy cannot log in to the database ({detail}). The secret's password is not the "
                                f"database's (changed by hand?), or its user does not exist"
                                + (" (on a first deploy the proxy holds only the master's secret, so it is the master's)"
                                   if first_deploy else "")
                                + "; docs/DEPLOY.md, 'When a step fails'.")
            return "stop", f"the proxy's target is UNAVAILABLE ({detail}); docs/DEPLOY.md, 'When a step fails'."
    return "wait", ""


def wait_proxy(session, stack, timeout, first_deploy=False, sleep=time.sleep, clock=time.time):
    """CloudFormation finishes the proxy's target group while its target is still registering;
    a connection before it is AVAILABLE fails (and migrate, the first, would fail the deploy).
    Waits through REGISTERING and UNAVAILABLE (the lifecycle RDS documents for a new target:
    registering > unavailable > available); stops at once on AUTH_FAILURE and the like, with the
    proxy's reason, and at the deadline with the last state seen."""
    proxy = physical_id(session.client("cloudformation"), stack, "DbProxy")
    rds = session.client("rds")
    deadline, last = clock() + timeout, None
    while True:
        targets = rds.describe_db_proxy_targets(DBProxyName=proxy)["Targets"]
        health = [t.get("TargetHealth", {}) for t in targets if t.get("Type") == "RDS_INSTANCE"]
        detail = "; ".join(f"{h.get('State')} {h.get('Reason', '')} {h.get('Description', '')}".strip() for h in health)
        if detail != last:
            print(f"  {proxy}: target {detail or 'none yet'}")
            last = detail
        verdict, message = proxy_verdict(health, first_deploy)
        if verdict == "done":
            return
        if verdict == "stop":
            raise Stop(f"{proxy}: {message}")
        if clock() > deadline:
            raise Stop(f"{proxy}'s target is not AVAILABLE after {timeout} s: {detail or 'no target'}. "
                       f"CONNECTION_FAILED or UNREACHABLE all along: the proxy's or the database's security group, "
                       f"or the database is down (docs/DEPLOY.md, 'When a step fails').")
        sleep(15)


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
            plain = [a for a in args if a != "--check-only"]
            account_ready(session, int(plain[0]), check_only="--check-only" in args,
                          app_stack=plain[1] if len(plain) > 1 else None)
        elif command == "wait-proxy":
            plain = [a for a in args if a != "--first"]
            wait_proxy(session, plain[0], int(plain[1]) if len(plain) > 1 else 1200, first_deploy="--first" in args)
        elif command == "deployed":
            print(deployed(cf, args[0], float(args[1])))
        elif command == "leftovers":
            for name in leftovers(session, args[0]):
                print(name)
        elif command == "protect":
            protect(cf, args[0])
        elif command == "alarm-email":
            state, pending = alarm_email(session, args[0])
            print(state)
            for endpoint in pending:
                print(f"  {endpoint} has not confirmed the subscription SNS mailed it: alarms reach no one until "
                      f"the link in that mail is followed (resend: aws sns subscribe --topic-arn ... "
                      f"--protocol email --notification-endpoint {endpoint})", file=sys.stderr)
        elif command == "outputs":
            for output in cf.describe_stacks(StackName=args[0])["Stacks"][0].get("Outputs", []):
                print(f"{output['OutputKey']}={output.get('OutputValue', '')}")
        elif command == "secret":
            print(session.client("secretsmanager").get_secret_value(SecretId=args[0])["SecretString"])
        elif command == "smoke-key":
            print(smoke_key(session, args[0], args[1]))
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
