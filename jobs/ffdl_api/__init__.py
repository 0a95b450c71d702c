"""FfDL's REST API (its `restapi/api_v1/swagger/swagger.yml`) served by Trainyard under `/ffdl/`, so that
FfDL's CLI and scripts written against FfDL keep working: same paths, parameters, field names, status
vocabulary and error shape, over Trainyard's selectors and services (docs/ffdl.md)."""
