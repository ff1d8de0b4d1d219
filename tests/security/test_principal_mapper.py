"""ssl.principal.mapping.rules against the examples of Kafka's own SslPrincipalMapperTest and its
documentation, and subject DNs printed the way Java's X500Principal.getName() prints them."""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from pybroker.security.principal_mapper import InvalidRule, NoMatchingRule, SslPrincipalMapper, rfc2253_name


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_valid_rules(rules):
    SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_invalid_rules(rules):
    with pytest.raises(InvalidRule):
        SslPrincipalMapper(rules)


def test_rules_applied_in_order():
    mapper = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, "
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, "
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, "
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, "
        "DEFAULT"
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


def test_rule_with_escaped_comma_in_the_dn():
    mapper = SslPrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


def test_documented_example_and_default():
    # Kafka's documentation: RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT
    mapper = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT"
    )
    assert mapper.name("CN=kafka-server1,OU=ServiceUsers,O=Org,C=US") == "kafka-server1"
    assert mapper.name("CN=adminUser,OU=Admin,O=Apache,L=Unknown,ST=CA,C=US") == "adminuser@admin"
    assert mapper.name("CN=kafka1,O=Apache") == "kafka1"
    assert SslPrincipalMapper("DEFAULT").name("CN=x,O=y") == "CN=x,O=y"
    assert SslPrincipalMapper(None).name("CN=x") == "CN=x"


def test_no_matching_rule():
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=Duke,OU=JavaSoft"):
        SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/").name("CN=Duke,OU=JavaSoft")


def test_back_references_beyond_the_groups_stay_literal():
    # Kafka escapes $N for a group that does not exist (escapeLiteralBackReferences); $12 with one
    # group is group 1 followed by "2", as Java reads it.
    assert SslPrincipalMapper("RULE:^CN=(.*)$/$1-$2/").name("CN=a") == "a-$2"
    assert SslPrincipalMapper("RULE:^CN=(.*)$/$12/").name("CN=a") == "a2"
    assert SslPrincipalMapper(r"RULE:^CN=(.*)$/\$1/").name("CN=a") == "$1"


def test_dn_printed_as_java_does():
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example, Inc."),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "Users"),
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
        ]
    )
    assert rfc2253_name(name) == r"CN=alice,OU=Users,O=Example\, Inc.,C=US"
    # Not an RFC 2253 keyword: Java prints the OID and the DER value in hex (IA5String "a@b.c").
    email = x509.Name(
        [x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b.c"), x509.NameAttribute(NameOID.COMMON_NAME, "x")]
    )
    assert rfc2253_name(email) == "CN=x,1.2.840.113549.1.9.1=#1605614062" + "2e63"
