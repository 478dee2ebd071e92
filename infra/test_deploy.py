"""infra/deploy's AWS decisions against stand-in clients (no AWS, no network), and its script's
guards. Run by infra/lint-template with the deploy venv's Python (boto3, botocore):

    .venv-deploy/bin/python infra/test_deploy.py

Each test names the failure it holds off: a stack left in REVIEW_IN_PROGRESS, a proxy wait that
gave up on the UNAVAILABLE a new target passes through, a declined change set taken for a
deploy, a concurrency check blind to the other stage, a DbName change that would replace the
database, a smoke test that renders for real.
"""
import os
import re
import subprocess
import sys
import unittest

from botocore.exceptions import ClientError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_aws as aws  # noqa: E402
import deploy_params as dp  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Waiter:
    def __init__(self, cf):
        self.cf = cf

    def wait(self, StackName, WaiterConfig=None):
        self.cf.states = []


class FakeCloudFormation:
    """describe_stacks answers from `states`, one per call (the last one repeats)."""

    def __init__(self, states, change_sets=()):
        self.states = list(states)
        self.change_sets = list(change_sets)
        self.deleted = []

    def describe_stacks(self, StackName):
        if not self.states or self.states[0] is None:
            raise ClientError({"Error": {"Code": "ValidationError", "Message": f"Stack with id {StackName} does not exist"}},
                              "DescribeStacks")
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return {"Stacks": [{"StackStatus": state}]}

    def delete_stack(self, StackName):
        self.deleted.append(StackName)

    def get_waiter(self, name):
        assert name == "stack_delete_complete"
        return Waiter(self)

    def get_paginator(self, name):
        assert name == "list_change_sets"
        outer = self

        class Pages:
            def paginate(self, StackName):
                return [{"Summaries": outer.change_sets}]
        return Pages()


class ReviewInProgress(unittest.TestCase):
    def setUp(self):
        # A wait sleeps 15 s per look, for an hour: here any sleep fails the test at once.
        def waited(seconds):
            raise AssertionError("waited on a stack in REVIEW_IN_PROGRESS")
        self.sleep, aws.time.sleep = aws.time.sleep, waited

    def tearDown(self):
        aws.time.sleep = self.sleep

    def test_settle_never_waits_on_review_in_progress(self):
        cf = FakeCloudFormation(["REVIEW_IN_PROGRESS"])
        # A wait would sleep 15 s per look and end only after an hour.
        self.assertEqual(aws.settle(cf, "s", timeout=0), "REVIEW_IN_PROGRESS")

    def test_a_stack_whose_first_change_set_was_declined_is_deleted(self):
        cf = FakeCloudFormation(["REVIEW_IN_PROGRESS"])
        self.assertIsNone(aws.clear_failed_create(cf, "osurender-prod"))
        self.assertEqual(cf.deleted, ["osurender-prod"])

    def test_a_deployed_stack_is_left_alone(self):
        cf = FakeCloudFormation(["UPDATE_COMPLETE"])
        self.assertEqual(aws.clear_failed_create(cf, "s"), "UPDATE_COMPLETE")
        self.assertEqual(cf.deleted, [])


class ProxyWait(unittest.TestCase):
    def verdict(self, *health, first=False):
        return aws.proxy_verdict(list(health), first)[0]

    def test_a_new_targets_lifecycle_is_waited_through(self):
        self.assertEqual(self.verdict(), "wait")  # no target yet
        self.assertEqual(self.verdict({"State": "REGISTERING"}), "wait")
        for reason in ("", "UNREACHABLE", "CONNECTION_FAILED", "PENDING_PROXY_CAPACITY"):
            self.assertEqual(self.verdict({"State": "UNAVAILABLE", "Reason": reason}), "wait", reason)
        self.assertEqual(self.verdict({"State": "AVAILABLE"}), "done")

    def test_auth_failure_stops_with_the_proxys_reason(self):
        verdict, message = aws.proxy_verdict(
            [{"State": "UNAVAILABLE", "Reason": "AUTH_FAILURE", "Description": "password authentication failed"}], True)
        self.assertEqual(verdict, "stop")
        self.assertIn("password authentication failed", message)
        self.assertIn("master", message)

    def test_wait_proxy_passes_registering_then_unavailable_then_available(self):
        looks = [[{"State": "REGISTERING"}], [{"State": "UNAVAILABLE", "Reason": "PENDING_PROXY_CAPACITY"}],
                 [{"State": "UNAVAILABLE"}], [{"State": "AVAILABLE"}]]

        class Rds:
            def describe_db_proxy_targets(self, DBProxyName):
                return {"Targets": [{"Type": "RDS_INSTANCE", "TargetHealth": h} for h in looks.pop(0)]}

        class Cf:
            def describe_stack_resource(self, StackName, LogicalResourceId):
                return {"StackResourceDetail": {"PhysicalResourceId": "osurender-dev"}}

        class Session:
            def client(self, name):
                return {"rds": Rds(), "cloudformation": Cf()}[name]

        clock = iter(range(0, 10000, 15))
        aws.wait_proxy(Session(), "base", 1800, sleep=lambda s: None, clock=lambda: next(clock))
        self.assertEqual(looks, [])


class DeclinedChangeSet(unittest.TestCase):
    def test_a_declined_update_stops(self):
        cf = FakeCloudFormation(["UPDATE_COMPLETE"], [{"ChangeSetName": "samcli-deploy1", "CreationTime": 2000.0,
                                                       "ExecutionStatus": "AVAILABLE"}])
        with self.assertRaisesRegex(aws.Stop, "declined"):
            aws.deployed(cf, "osurender-prod", 1000.0)

    def test_a_declined_first_create_stops(self):
        with self.assertRaisesRegex(aws.Stop, "declined"):
            aws.deployed(FakeCloudFormation(["REVIEW_IN_PROGRESS"]), "osurender-prod", 1000.0)

    def test_a_deploy_and_no_changes_pass(self):
        executed = [{"ChangeSetName": "a", "CreationTime": 2000.0, "ExecutionStatus": "EXECUTE_COMPLETE"},
                    {"ChangeSetName": "old", "CreationTime": 10.0, "ExecutionStatus": "AVAILABLE"}]
        self.assertEqual(aws.deployed(FakeCloudFormation(["UPDATE_COMPLETE"], executed), "s", 1000.0), "UPDATE_COMPLETE")
        self.assertEqual(aws.deployed(FakeCloudFormation(["CREATE_COMPLETE"]), "s", 1000.0), "CREATE_COMPLETE")
        with self.assertRaises(aws.Stop):
            aws.deployed(FakeCloudFormation(["ROLLBACK_COMPLETE"]), "s", 1000.0)


class Concurrency(unittest.TestCase):
    def test_the_other_stages_reservations_count(self):
        # Limit 1000; prod reserves 400 (unreserved 600); dev, not yet deployed, asks 450.
        settings = {"AccountLimit": {"ConcurrentExecutions": 1000, "UnreservedConcurrentExecutions": 600}}
        limit, others, left = aws.concurrency_left(settings, 450, own=0)
        self.assertEqual((limit, others, left), (1000, 400, 150))
        # prod redeployed with 420: its own 400 are replaced, not counted twice.
        self.assertEqual(aws.concurrency_left(settings, 420, own=400)[2], 580)
        settings["AccountLimit"]["UnreservedConcurrentExecutions"] = 500
        self.assertLess(aws.concurrency_left(settings, 450, own=0)[2], 100)


class ReplacingParameters(unittest.TestCase):
    base = {"Parameters": {"Stage": {"Type": "String", "Default": "dev"},
                           "DbName": {"Type": "String", "Default": "osurender"},
                           "DbEngineVersion": {"Type": "String", "Default": "16", "AllowedValues": ["16", "17"]}}}

    def test_a_dbname_change_on_an_existing_stack_is_refused(self):
        existing = {"Stage": "dev", "DbName": "osurender", "DbEngineVersion": "16"}
        with self.assertRaisesRegex(dp.DeployError, "DbName"):
            dp.resolve(self.base, {"DbName": "other"}, existing=existing)
        self.assertEqual(dp.resolve(self.base, {}, existing=existing)["DbName"][0], "osurender")
        self.assertEqual(dp.resolve(self.base, {"DbName": "other"})["DbName"][0], "other")  # a first deploy

    def test_a_postgres_downgrade_is_refused_an_upgrade_passes(self):
        with self.assertRaisesRegex(dp.DeployError, "downgrade"):
            dp.resolve(self.base, {}, existing={"DbName": "osurender", "DbEngineVersion": "17"})
        self.assertEqual(dp.resolve(self.base, {"DbEngineVersion": "17"},
                                    existing={"DbName": "osurender", "DbEngineVersion": "16"})["DbEngineVersion"][0], "17")

    def test_major_upgrades_are_allowed_in_the_template(self):
        from samtranslator.yaml_helper import yaml_parse
        base = yaml_parse(open(os.path.join(ROOT, "infra/base.yaml")).read())
        self.assertIs(base["Resources"]["Database"]["Properties"].get("AllowMajorVersionUpgrade"), True)


class Pages:
    def __init__(self, pages):
        self.pages = pages

    def paginate(self, **kwargs):
        return self.pages


class AlarmEmailAndLeftovers(unittest.TestCase):
    def session(self, subscriptions=(), bucket_code=None):
        class Cf:
            def describe_stacks(self, StackName):
                return {"Stacks": [{"Outputs": [{"OutputKey": "AlarmTopicArn", "OutputValue": "arn:topic"}]}]}

        class Sns:
            def get_paginator(self, name):
                return Pages([{"Subscriptions": list(subscriptions)}])

        class Sts:
            def get_caller_identity(self):
                return {"Account": "123456789012"}

        class S3:
            def head_bucket(self, Bucket, ExpectedBucketOwner):
                if bucket_code:
                    raise ClientError({"Error": {"Code": bucket_code}}, "HeadBucket")
                return {}

        class Session:
            region_name = "us-east-1"

            def client(self, name):
                return {"cloudformation": Cf(), "sns": Sns(), "sts": Sts(), "s3": S3()}[name]
        return Session()

    def test_an_unconfirmed_subscription_is_reported(self):
        pending = {"Protocol": "email", "Endpoint": "a@example.com", "SubscriptionArn": "PendingConfirmation"}
        confirmed = {"Protocol": "email", "Endpoint": "a@example.com", "SubscriptionArn": "arn:aws:sns:x:1:t:abc"}
        self.assertEqual(aws.alarm_email(self.session([pending]), "base"), ("PENDING", ["a@example.com"]))
        self.assertEqual(aws.alarm_email(self.session([confirmed]), "base")[0], "CONFIRMED")
        self.assertEqual(aws.alarm_email(self.session([]), "base")[0], "NONE")

    def test_a_deleted_stages_bucket_is_found_before_a_first_create(self):
        self.assertEqual(aws.leftovers(self.session(), "dev"), ["osurender-dev-123456789012-us-east-1"])
        self.assertEqual(aws.leftovers(self.session(bucket_code="404"), "dev"), [])
        from samtranslator.yaml_helper import yaml_parse
        app = yaml_parse(open(os.path.join(ROOT, "template.yaml")).read())
        self.assertEqual(app["Resources"]["Bucket"]["Properties"]["BucketName"],
                         {"Fn::Sub": "osurender-${Stage}-${AWS::AccountId}-${AWS::Region}"})


class Scripts(unittest.TestCase):
    def test_smoke_refuses_a_live_key(self):
        run = subprocess.run([os.path.join(ROOT, "infra/smoke"), "http://127.0.0.1:9"], capture_output=True, text=True,
                             env={**os.environ, "SMOKE_API_KEY": "osr_live_x"}, timeout=30)
        self.assertEqual(run.returncode, 64, run.stderr)
        self.assertIn("sandbox", run.stderr)

    def test_deploy_checks_what_aws_does_not(self):
        script = open(os.path.join(ROOT, "infra/deploy")).read()
        # sam deploy exits 0 on a declined change set: every deploy_stack asks the stack after.
        body = script.partition("deploy_stack() {")[2].partition("\n}\n")[0]
        self.assertRegex(body, r'aws_ deployed "\$stack"')
        # Build scripts compile C for the host: a missing compiler is said before sam build.
        self.assertRegex(script, r"command -v cc\b[^\n]*\n[^\n]*build-essential")
        # The concurrency check sees this stack's current reservations (the others' are counted).
        self.assertEqual(len(re.findall(r'account-ready [^\n]*"\$reserved" "\$app_stack"', script)), 2)
        # The database cannot be replaced by an update; the smoke test renders with a sandbox key.
        self.assertIn('aws_ protect "$base_stack"', script)
        self.assertIn("export SMOKE_API_KEY", script)
        self.assertIn("aws_ alarm-email", script)
        self.assertIn('"$root/infra/cost.py"', script.partition("if ((check_only))")[0])
        policy = aws.STACK_POLICY["Statement"]
        self.assertIn({"Effect": "Deny", "Action": "Update:Replace", "Principal": "*",
                       "Resource": "LogicalResourceId/Database"}, policy)


if __name__ == "__main__":
    unittest.main(verbosity=1)
