"""raybroker's security model, as Kafka's: ACL bindings and their filters (`acls`), the authorizer that answers
"may this principal do this to that resource" (`authorizer`), SCRAM credentials (`scram`), and the plain stores the
controller keeps them in (`acl_store`, `credential_store`). Pure Python: the controller actor persists the stores
in its metadata log, the Kafka listener authorizes with `Authorizer` and authenticates with `ScramCredential`.
"""
