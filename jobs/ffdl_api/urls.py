"""FfDL's paths (its swagger.yml), mounted at `/ffdl/` by portal/urls.py: point DLAAS_URL at
`http(s)://<host>/ffdl` and FfDL's CLI calls `/ffdl/v1/models...`."""

from django.urls import path

from jobs.ffdl_api import views

urlpatterns = [
    path("v1/models", views.ModelsView.as_view(), name="ffdl-models"),
    path("v1/models/<str:model_id>", views.ModelView.as_view(), name="ffdl-model"),
    path("v1/models/<str:model_id>/definition", views.DefinitionView.as_view(), name="ffdl-definition"),
    path(
        "v1/models/<str:model_id>/trained_model", views.TrainedModelView.as_view(), name="ffdl-trained-model"
    ),
    path("v1/models/<str:model_id>/logs", views.LogsView.as_view(), name="ffdl-logs"),
    path("v1/models/<str:model_id>/metrics", views.MetricsView.as_view(), name="ffdl-metrics"),
    path("v1/logs/<str:model_id>/loglines", views.LoglinesView.as_view(), name="ffdl-loglines"),
]
