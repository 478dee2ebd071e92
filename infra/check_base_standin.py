"""infra/base.yaml created by the AWS stand-in's CloudFormation (moto), then deleted.

    python infra/check_base_standin.py infra/base.yaml docs/DEPLOY.md

Run by infra/lint-template (with the deploy venv's Python: boto3, samtranslator) when the
stand-in answers at AWS_ENDPOINT_URL (127.0.0.1:4566 by default; ./infra/up.sh starts it).

moto's CloudFormation creates some resource types and not others. The ones it cannot create are
listed in docs/DEPLOY.md between the markers `<!-- standin-cannot-create -->` and
`<!-- /standin-cannot-create -->`, in `- ` bullets naming each `AWS::Type` in backticks. This test
  1. proves each listed type is indeed not created (a stack of that one resource comes up empty),
     so the list holds no type the stand-in could create;
  2. creates the base stack with those types taken out (a Ref or GetAtt of one becomes a
     placeholder string), every condition on (prod-like names off: a unique stage), and
     requires every other resource CREATE_COMPLETE, the network, database, topic and role to
     exist behind their ids as the template describes them, and every output to be there;
  3. deletes the stack, and whatever of it is left if the delete fails.
DeletionPolicy/UpdateReplacePolicy attributes are removed for the stand-in, which knows neither;
cfn-lint, `sam validate --lint` and infra/check_stack.py check them. A resource whose Condition is
false with the stand-in's parameters (the defaults: NAT gateway, endpoints in both AZs, RDS Proxy)
must not be there; the rest must.
"""
import os
import re
import secrets
import sys
import time

import boto3
from samtranslator.yaml_helper import yaml_parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cost  # noqa: E402  (its condition evaluator)

ENDPOINT = os.environ.get("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
REGION = os.environ.get("AWS_REGION", "us-east-1")
MARKERS = ("<!-- standin-cannot-create -->", "<!-- /standin-cannot-create -->")
# moto's quirks, each undone for the stand-in copy only (and listed in docs/DEPLOY.md too):
# its Ref of an AWS::RDS::DBParameterGroup is an object, not the group's name.
DETACHED = {("Database", "DBParameterGroupName")}

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)


def client(service):
    return boto3.client(
        service,
        endpoint_url=ENDPOINT,
        region_name=REGION,
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "test"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
    )


def listed_types(deploy_md):
    text = open(deploy_md).read()
    start, end = text.find(MARKERS[0]), text.find(MARKERS[1])
    if start < 0 or end < start:
        sys.exit(f"{deploy_md}: no {MARKERS[0]} ... {MARKERS[1]} section")
    bullets = [line for line in text[start:end].splitlines() if line.startswith("- ")]
    return [t for line in bullets for t in re.findall(r"`(AWS::[A-Za-z0-9]+::[A-Za-z0-9]+)`", line)]


def without(template, types):
    """The template for the stand-in: `types` removed, references to them made placeholders."""
    template = dict(template)
    template.pop("Transform", None)
    gone = {k for k, r in template["Resources"].items() if r["Type"] in types}

    def sub(text):
        return re.sub(
            r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z0-9.]+)?\}",
            lambda m: f"standin-{m.group(1)}" if m.group(1) in gone else m.group(0),
            text,
        )

    def walk(value):
        if isinstance(value, dict):
            if set(value) == {"Ref"} and value["Ref"] in gone:
                return f"standin-{value['Ref']}"
            if set(value) == {"Fn::GetAtt"} and value["Fn::GetAtt"][0] in gone:
                return "standin-" + "-".join(value["Fn::GetAtt"])
            if set(value) == {"Fn::Sub"}:
                body = value["Fn::Sub"]
                if isinstance(body, str):
                    return {"Fn::Sub": sub(body)}
                return {"Fn::Sub": [sub(body[0]), walk(body[1])]}
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    resources = {}
    for name, resource in template["Resources"].items():
        if name in gone:
            continue
        resource = {k: v for k, v in resource.items() if k not in ("DeletionPolicy", "UpdateReplacePolicy")}
        depends = resource.get("DependsOn")
        if depends:
            depends = [d for d in ([depends] if isinstance(depends, str) else depends) if d not in gone]
            resource["DependsOn"] = depends
            if not depends:
                del resource["DependsOn"]
        resource = walk(resource)
        for logical, prop in DETACHED:
            if name == logical:
                resource["Properties"].pop(prop, None)
        resources[name] = resource
    template["Resources"] = resources
    template["Outputs"] = walk(template.get("Outputs", {}))
    return template, gone


def wait(cf, name, until):
    for _ in range(120):
        try:
            stack = cf.describe_stacks(StackName=name)["Stacks"][0]
        except cf.exceptions.ClientError:
            return None
        if not stack["StackStatus"].endswith("_IN_PROGRESS"):
            return stack
        time.sleep(0.5)
    return stack


def params(stage):
    return [
        {"ParameterKey": "Stage", "ParameterValue": stage},
        {"ParameterKey": "AvailabilityZoneId1", "ParameterValue": "use1-az1"},
        {"ParameterKey": "AvailabilityZoneId2", "ParameterValue": "use1-az2"},
        {"ParameterKey": "CallbackEgress", "ParameterValue": "true"},
        {"ParameterKey": "AlarmEmail", "ParameterValue": "alarms@example.com"},
    ]


class Lookup:
    """Whether a resource of the stack exists behind the stand-in's service APIs (not only in
    its CloudFormation's resource list, which also names what it skipped)."""

    def __init__(self, stack, stage):
        self.stack, self.stage = stack, stage
        self.ec2, self.rds, self.sns = client("ec2"), client("rds"), client("sns")
        self.iam, self.sm, self.cw = client("iam"), client("secretsmanager"), client("cloudwatch")

    def __call__(self, name, resource, physical):
        kind, props = resource["Type"], resource.get("Properties", {})
        try:
            return getattr(self, kind.replace("AWS::", "").replace("::", "_"))(name, props, physical.get(name), physical)
        except Exception:
            return False

    def EC2_VPC(self, name, props, pid, physical):
        return bool(self.ec2.describe_vpcs(VpcIds=[pid])["Vpcs"])

    def EC2_Subnet(self, name, props, pid, physical):
        return bool(self.ec2.describe_subnets(SubnetIds=[pid])["Subnets"])

    def EC2_RouteTable(self, name, props, pid, physical):
        return bool(self.ec2.describe_route_tables(RouteTableIds=[pid])["RouteTables"])

    def EC2_SubnetRouteTableAssociation(self, name, props, pid, physical):
        table = self.ec2.describe_route_tables(RouteTableIds=[physical[props["RouteTableId"]["Ref"]]])["RouteTables"][0]
        return physical[props["SubnetId"]["Ref"]] in [a.get("SubnetId") for a in table["Associations"]]

    def EC2_InternetGateway(self, name, props, pid, physical):
        return bool(self.ec2.describe_internet_gateways(InternetGatewayIds=[pid])["InternetGateways"])

    def EC2_VPCGatewayAttachment(self, name, props, pid, physical):
        gateway = self.ec2.describe_internet_gateways(
            InternetGatewayIds=[physical[props["InternetGatewayId"]["Ref"]]])["InternetGateways"][0]
        return physical[props["VpcId"]["Ref"]] in [a["VpcId"] for a in gateway["Attachments"]]

    def EC2_Route(self, name, props, pid, physical):
        table = self.ec2.describe_route_tables(RouteTableIds=[physical[props["RouteTableId"]["Ref"]]])["RouteTables"][0]
        # NatGatewayId / InstanceId: an Fn::If on the egress kind, its NAT gateway branch here.
        targets = [props.get(k) for k in ("GatewayId", "NatGatewayId")]
        targets = [t["Fn::If"][1] if isinstance(t, dict) and "Fn::If" in t else t for t in targets if t]
        target = physical[targets[0]["Ref"]]
        return any(r.get("DestinationCidrBlock") == props["DestinationCidrBlock"]
                   and target in (r.get("GatewayId"), r.get("NatGatewayId")) for r in table["Routes"])

    def EC2_EIP(self, name, props, pid, physical):
        return bool(self.ec2.describe_addresses(PublicIps=[pid])["Addresses"])

    def EC2_NatGateway(self, name, props, pid, physical):
        return self.ec2.describe_nat_gateways(NatGatewayIds=[pid])["NatGateways"][0]["State"] == "available"

    def EC2_VPCEndpoint(self, name, props, pid, physical):
        return bool(self.ec2.describe_vpc_endpoints(VpcEndpointIds=[pid])["VpcEndpoints"])

    def EC2_SecurityGroup(self, name, props, pid, physical):
        return bool(self.ec2.describe_security_groups(GroupIds=[pid])["SecurityGroups"])

    def Logs_LogGroup(self, name, props, pid, physical):
        wanted = props["LogGroupName"]["Fn::Sub"].replace("${Stage}", self.stage)
        return any(g["logGroupName"] == wanted for g in client("logs").describe_log_groups(logGroupNamePrefix=wanted)["logGroups"])

    def SNS_TopicPolicy(self, name, props, pid, physical):
        topic = next(t["TopicArn"] for t in self.sns.list_topics()["Topics"] if t["TopicArn"].endswith(f":osurender-{self.stage}-alarms"))
        return "budgets.amazonaws.com" in self.sns.get_topic_attributes(TopicArn=topic)["Attributes"].get("Policy", "")

    def EC2_SecurityGroupIngress(self, name, props, pid, physical):
        group = self.ec2.describe_security_groups(GroupIds=[physical[props["GroupId"]["Ref"]]])["SecurityGroups"][0]
        source = physical[props["SourceSecurityGroupId"]["Ref"]]
        return any(p.get("FromPort") == props["FromPort"] and source in [g["GroupId"] for g in p.get("UserIdGroupPairs", [])]
                   for p in group["IpPermissions"])

    def SecretsManager_Secret(self, name, props, pid, physical):
        wanted = props["Name"]["Fn::Sub"].replace("${Stage}", self.stage)
        return any(s["Name"] == wanted for s in self.sm.list_secrets()["SecretList"])

    def RDS_DBSubnetGroup(self, name, props, pid, physical):
        wanted = sorted(physical[s["Ref"]] for s in props["SubnetIds"])
        return any(sorted(s["SubnetIdentifier"] for s in g["Subnets"]) == wanted
                   for g in self.rds.describe_db_subnet_groups()["DBSubnetGroups"])

    def RDS_DBParameterGroup(self, name, props, pid, physical):
        return any(g["DBParameterGroupName"].startswith(self.stack.lower())
                   for g in self.rds.describe_db_parameter_groups()["DBParameterGroups"])

    def RDS_DBInstance(self, name, props, pid, physical):
        return bool(self.rds.describe_db_instances(DBInstanceIdentifier=pid)["DBInstances"])

    def RDS_DBProxy(self, name, props, pid, physical):
        return bool(self.rds.describe_db_proxies(DBProxyName=f"osurender-{self.stage}")["DBProxies"])

    def RDS_DBProxyTargetGroup(self, name, props, pid, physical):
        return bool(self.rds.describe_db_proxy_target_groups(DBProxyName=f"osurender-{self.stage}")["TargetGroups"])

    def IAM_Role(self, name, props, pid, physical):
        return bool(self.iam.get_role(RoleName=pid)["Role"])

    def SNS_Topic(self, name, props, pid, physical):
        return any(t["TopicArn"].endswith(f":osurender-{self.stage}-alarms") for t in self.sns.list_topics()["Topics"])

    def SNS_Subscription(self, name, props, pid, physical):
        return any(s["Endpoint"] == "alarms@example.com" and f"osurender-{self.stage}-alarms" in s["TopicArn"]
                   for s in self.sns.list_subscriptions()["Subscriptions"])

    def CloudWatch_Alarm(self, name, props, pid, physical):
        return any(a.get("AlarmDescription") == props.get("AlarmDescription")
                   and self.stack in a.get("AlarmName", "") for a in self.cw.describe_alarms()["MetricAlarms"])


def create(cf, template, stack, stage):
    import json
    cf.create_stack(StackName=stack, TemplateBody=json.dumps(template), Parameters=params(stage),
                    Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"])
    created = wait(cf, stack, "CREATE")
    # (the stand-in lists what it skipped too, without a logical or physical id)
    physical = {r["LogicalResourceId"]: r.get("PhysicalResourceId")
                for r in cf.describe_stack_resources(StackName=stack)["StackResources"]
                if r.get("LogicalResourceId")}
    return created, physical


def delete(cf, stack, stage):
    """The stack deleted, and what the stand-in's DeleteStack leaves (it deletes the subnets and
    security groups, then refuses the VPC over the route tables, endpoints, NAT and internet
    gateways it keeps) swept by the stage's names. Nothing of it stays."""
    try:
        cf.delete_stack(StackName=stack)
        wait(cf, stack, "DELETE")
    except Exception as error:
        if "DependencyViolation" not in str(error):
            failures.append(f"deleting {stack}: {error}")
    sweep(stage)
    left = client("ec2").describe_vpcs(Filters=[{"Name": "tag:Name", "Values": [f"osurender-{stage}"]}])["Vpcs"]
    check(not left, f"{stack}: its VPC is still there after the sweep")


def prove_not_created(cf, resource_type, template):
    """A stack of the one resource of `resource_type` (references to others made placeholders)
    leaves nothing behind the service's API: the stand-in cannot create the type."""
    name = next(k for k, r in template["Resources"].items() if r["Type"] == resource_type)
    others = {r["Type"] for k, r in template["Resources"].items() if k != name}
    single, _ = without(template, others)
    single = {"Parameters": template["Parameters"], "Conditions": template.get("Conditions", {}),
              "Resources": single["Resources"]}
    stage = "t" + secrets.token_hex(4)
    stack = f"osurender-standin-{stage}"
    try:
        _, physical = create(cf, single, stack, stage)
        check(not Lookup(stack, stage)(name, template["Resources"][name], physical),
              f"the stand-in creates {resource_type} ({name}): take it off docs/DEPLOY.md's list")
    except Exception as error:  # refused outright: not creatable either
        print(f"  {resource_type}: refused by the stand-in ({type(error).__name__})")
    finally:
        delete(cf, stack, stage)


def sweep(stage):
    """Whatever is left of stage `stage` (the VPC carries its name; the rest hangs off it)."""
    ec2, rds, sns = client("ec2"), client("rds"), client("sns")
    vpcs = ec2.describe_vpcs(Filters=[{"Name": "tag:Name", "Values": [f"osurender-{stage}"]}])["Vpcs"]
    for vpc in vpcs:
        f = [{"Name": "vpc-id", "Values": [vpc["VpcId"]]}]
        for db in rds.describe_db_instances()["DBInstances"]:
            if db.get("DBSubnetGroup", {}).get("VpcId") == vpc["VpcId"]:
                rds.delete_db_instance(DBInstanceIdentifier=db["DBInstanceIdentifier"], SkipFinalSnapshot=True)
        for group in rds.describe_db_subnet_groups()["DBSubnetGroups"]:
            if group.get("VpcId") == vpc["VpcId"]:
                rds.delete_db_subnet_group(DBSubnetGroupName=group["DBSubnetGroupName"])
        for e in ec2.describe_vpc_endpoints(Filters=f)["VpcEndpoints"]:
            ec2.delete_vpc_endpoints(VpcEndpointIds=[e["VpcEndpointId"]])
        for n in ec2.describe_nat_gateways(Filters=f)["NatGateways"]:
            if n["State"] != "deleted":
                ec2.delete_nat_gateway(NatGatewayId=n["NatGatewayId"])
            for a in n.get("NatGatewayAddresses", []):
                try:
                    ec2.release_address(AllocationId=a["AllocationId"])
                except Exception:
                    pass
        for g in ec2.describe_internet_gateways(
            Filters=[{"Name": "attachment.vpc-id", "Values": [vpc["VpcId"]]}]
        )["InternetGateways"]:
            ec2.detach_internet_gateway(InternetGatewayId=g["InternetGatewayId"], VpcId=vpc["VpcId"])
            ec2.delete_internet_gateway(InternetGatewayId=g["InternetGatewayId"])
        for rt in ec2.describe_route_tables(Filters=f)["RouteTables"]:
            if any(a.get("Main") for a in rt["Associations"]):
                continue
            for a in rt["Associations"]:
                ec2.disassociate_route_table(AssociationId=a["RouteTableAssociationId"])
            ec2.delete_route_table(RouteTableId=rt["RouteTableId"])
        for s in ec2.describe_subnets(Filters=f)["Subnets"]:
            ec2.delete_subnet(SubnetId=s["SubnetId"])
        for eni in ec2.describe_network_interfaces(Filters=f)["NetworkInterfaces"]:
            ec2.delete_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"])
        groups = [g for g in ec2.describe_security_groups(Filters=f)["SecurityGroups"] if g["GroupName"] != "default"]
        for g in groups:
            if g["IpPermissions"]:
                ec2.revoke_security_group_ingress(GroupId=g["GroupId"], IpPermissions=g["IpPermissions"])
            if g["IpPermissionsEgress"]:
                ec2.revoke_security_group_egress(GroupId=g["GroupId"], IpPermissions=g["IpPermissionsEgress"])
        for g in groups:
            ec2.delete_security_group(GroupId=g["GroupId"])
        ec2.delete_vpc(VpcId=vpc["VpcId"])
    for topic in sns.list_topics()["Topics"]:
        if topic["TopicArn"].endswith(f":osurender-{stage}-alarms"):
            sns.delete_topic(TopicArn=topic["TopicArn"])
    for prefix in ("db-master", "db-app", "origin-secret", "webhook-secret"):
        try:
            client("secretsmanager").delete_secret(SecretId=f"osurender/{stage}/{prefix}", ForceDeleteWithoutRecovery=True)
        except Exception:
            pass


def main(base_path, deploy_md):
    template = yaml_parse(open(base_path).read())
    types = listed_types(deploy_md)
    check(types, "docs/DEPLOY.md lists no type the stand-in cannot create")
    in_template = {r["Type"] for r in template["Resources"].values()}
    for t in types:
        check(t in in_template, f"docs/DEPLOY.md lists {t}, which infra/base.yaml does not use")

    cf, ec2, rds = client("cloudformation"), client("ec2"), client("rds")
    for t in sorted(set(types) & in_template):
        prove_not_created(cf, t, template)

    standin, gone = without(template, set(types))
    stage = "t" + secrets.token_hex(4)
    stack = f"osurender-base-standin-{stage}"
    try:
        created, physical = create(cf, standin, stack, stage)
        check(created and created["StackStatus"] == "CREATE_COMPLETE",
              f"stack {stack}: {created and created['StackStatus']} {created and created.get('StackStatusReason')}")
        exists = Lookup(stack, stage)
        values = {k: str(v.get("Default", "")) for k, v in template["Parameters"].items()}
        values.update({p["ParameterKey"]: p["ParameterValue"] for p in params(stage)})
        for name, resource in standin["Resources"].items():
            if "Condition" in resource and not cost.condition_true(template, values, resource["Condition"]):
                check(name not in physical, f"{name}: created, though its condition {resource['Condition']} is false")
                continue
            check(exists(name, resource, physical), f"{name} ({resource['Type']}) was not created")
        outputs = {o["OutputKey"]: o["OutputValue"] for o in (created or {}).get("Outputs", [])}
        check(set(outputs) == set(template["Outputs"]),
              f"outputs {sorted(outputs)} != the template's {sorted(template['Outputs'])}")

        # The network as described: five subnets, four endpoints (the two gateway ones on both
        # private route tables), five security groups, the NAT gateway for the callback subnets.
        f = [{"Name": "vpc-id", "Values": [physical.get("Vpc") or "none"]}]
        vpc = ec2.describe_vpcs(VpcIds=[physical["Vpc"]])["Vpcs"][0] if physical.get("Vpc") else {}
        check(vpc.get("CidrBlock") == "10.20.0.0/16", f"VPC: {vpc.get('CidrBlock')}")
        subnets = {s["SubnetId"] for s in ec2.describe_subnets(Filters=f)["Subnets"]}
        check(len(subnets) == 5, f"5 subnets expected, {len(subnets)}")
        for output in ("VpcSubnetIds", "CallbackSubnetIds"):
            ids = outputs.get(output, "").split(",")
            check(len(ids) == 2 and set(ids) <= subnets, f"{output} {ids}: two subnets of the VPC")
        endpoints = ec2.describe_vpc_endpoints(Filters=f)["VpcEndpoints"]
        kinds = sorted((e["VpcEndpointType"], e["ServiceName"].rsplit(".", 1)[-1]) for e in endpoints)
        check(kinds == [("Gateway", "dynamodb"), ("Gateway", "s3"), ("Interface", "secretsmanager"), ("Interface", "sqs")],
              f"VPC endpoints: {kinds}")
        for e in endpoints:
            if e["VpcEndpointType"] == "Gateway":
                check(sorted(e.get("RouteTableIds", [])) == sorted([physical.get("PrivateRouteTable"), physical.get("CallbackRouteTable")]),
                      f"{e['ServiceName']}: on both private route tables")
        groups = [g for g in ec2.describe_security_groups(Filters=f)["SecurityGroups"] if g["GroupName"] != "default"]
        check(len(groups) == 5, f"5 security groups expected, {len(groups)}")
        check(outputs.get("VpcSecurityGroupIds") == physical.get("FunctionSecurityGroup"), "VpcSecurityGroupIds")
        check(outputs.get("CallbackSecurityGroupIds") == physical.get("CallbackSecurityGroup"), "CallbackSecurityGroupIds")
        private = ec2.describe_route_tables(RouteTableIds=[physical.get("PrivateRouteTable")])["RouteTables"][0]["Routes"]
        check(not any(r.get("NatGatewayId") or (r.get("GatewayId") or "").startswith("igw-") for r in private),
              "the private route table has no way out")
        check(outputs.get("CallbackEgressIps") == physical.get("NatAddress"), "CallbackEgressIps: the NAT's address")

        # The database: PostgreSQL in the private subnets, encrypted, private, single-AZ with a
        # week of backups outside prod; its parameter group (made, not attached on the stand-in)
        # with max_connections.
        db = rds.describe_db_instances(DBInstanceIdentifier=physical.get("Database"))["DBInstances"][0]
        check(db["Engine"] == "postgres" and db.get("StorageEncrypted") and not db.get("PubliclyAccessible"),
              "Database: postgres, encrypted, private")
        check(db.get("MultiAZ") is False and db.get("BackupRetentionPeriod") == 7,
              f"Database: MultiAZ {db.get('MultiAZ')}, backups {db.get('BackupRetentionPeriod')}")
        members = sorted(s["SubnetIdentifier"] for s in db.get("DBSubnetGroup", {}).get("Subnets", []))
        check(members == sorted(outputs.get("VpcSubnetIds", "").split(",")), "Database: in the private subnets")
        groups = [g["DBParameterGroupName"] for g in rds.describe_db_parameter_groups()["DBParameterGroups"]
                  if g["DBParameterGroupName"].startswith(stack.lower())]
        values = {p["ParameterName"]: p.get("ParameterValue")
                  for g in groups for p in rds.describe_db_parameters(DBParameterGroupName=g)["Parameters"]}
        check(values.get("max_connections") == "190", f"max_connections {values.get('max_connections')}")
        check(outputs.get("DbName") == "osurender", "DbName output")
        check(outputs.get("AlarmTopicArn", "").endswith(f":osurender-{stage}-alarms"), "AlarmTopicArn output")
    finally:
        delete(cf, stack, stage)

    print(f"base.yaml on the stand-in: {len(standin['Resources'])} resources created and deleted; "
          f"not creatable there (docs/DEPLOY.md): {', '.join(sorted(set(types)))}")
    for failure in failures:
        print(f"base stand-in: {failure}", file=sys.stderr)
    if failures:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
