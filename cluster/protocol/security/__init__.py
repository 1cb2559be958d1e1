"""The listener's security: TLS contexts and certificate principals (`tls`), the SASL mechanisms' server side
(`sasl`), and the authorizer the handlers ask (`access`)."""
