//! Team member rows (people, as the identity provider knows them; not keys).

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::change::{Changed, WriteTx};
use super::{now_ts, Store, StoreError};

#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub id: String,
    #[serde(skip)]
    pub tenant_id: String,
    pub email: String,
    pub role: String,
    pub idp_user_id: String,
    pub name: String,
    pub image_url: String,
    pub joined_at: String,
    pub team_id: Option<String>,
}

const COLUMNS: &str = "id, tenant_id, team_id, email, role, idp_user_id, name, image_url, joined_at";

const TABLE: super::rows::Table = super::rows::Table { name: "team_members", columns: COLUMNS };

fn from_row(r: &AnyRow) -> Result<Member, sqlx::Error> {
    Ok(Member {
        id: r.try_get("id")?,
        tenant_id: r.try_get("tenant_id")?,
        email: r.try_get("email")?,
        role: r.try_get("role")?,
        idp_user_id: r.try_get("idp_user_id")?,
        name: r.try_get("name")?,
        image_url: r.try_get("image_url")?,
        joined_at: r.try_get("joined_at")?,
        team_id: r.try_get("team_id")?,
    })
}

/// Fields of a new member; absent optional strings are stored as "".
pub struct NewMember {
    pub email: String,
    pub role: String,
    pub idp_user_id: String,
    pub name: String,
    pub image_url: String,
    pub team_id: Option<String>,
}

/// Changes to a member: None leaves a field unchanged; `team_id: Some(None)` clears the team.
#[derive(Default)]
pub struct MemberPatch {
    pub email: Option<String>,
    pub role: Option<String>,
    pub idp_user_id: Option<String>,
    pub name: Option<String>,
    pub image_url: Option<String>,
    pub team_id: Option<Option<String>>,
}

pub async fn insert(store: &Store, tenant_id: &str, m: NewMember) -> Result<Member, StoreError> {
    let member = Member {
        id: uuid::Uuid::now_v7().to_string(),
        tenant_id: tenant_id.to_string(),
        email: m.email,
        role: m.role,
        idp_user_id: m.idp_user_id,
        name: m.name,
        image_url: m.image_url,
        joined_at: now_ts(),
        team_id: m.team_id,
    };
    let r = member.clone();
    store
        .write(move |tx, _| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO team_members (id, tenant_id, team_id, email, role, idp_user_id, name, image_url, joined_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind(r.id)
                .bind(r.tenant_id)
                .bind(r.team_id)
                .bind(r.email)
                .bind(r.role)
                .bind(r.idp_user_id)
                .bind(r.name)
                .bind(r.image_url)
                .bind(r.joined_at)
                .execute(&mut **tx)
                .await?;
                Ok(Changed::to(member.id.clone(), member))
            })
        })
        .await
}

/// All members of the tenant, oldest first.
pub async fn list(store: &Store, tenant_id: &str) -> Result<Vec<Member>, StoreError> {
    let t = tenant_id.to_string();
    store
        .run(|pool, _| async move {
            let sql = format!("SELECT {COLUMNS} FROM team_members WHERE tenant_id = $1 ORDER BY joined_at, id");
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

pub async fn update(store: &Store, tenant_id: &str, id: &str, p: MemberPatch) -> Result<Option<Member>, StoreError> {
    let (t, id) = (tenant_id.to_string(), id.to_string());
    store
        .write(move |tx, _| {
            Box::pin(async move {
                Ok(match update_in(tx, &t, &id, p).await? {
                    Some(m) => Changed::to(id, Some(m)),
                    None => Changed::nothing(None),
                })
            })
        })
        .await
}

/// [`update`]'s statements, in its write transaction.
async fn update_in(tx: &mut WriteTx, t: &str, id: &str, p: MemberPatch) -> Result<Option<Member>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM team_members WHERE tenant_id = $1 AND id = $2");
    let Some(row) = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).bind(id).fetch_optional(&mut **tx).await? else {
        return Ok(None);
    };
    let mut m = from_row(&row)?;
    let fields = [
        (&mut m.email, p.email),
        (&mut m.role, p.role),
        (&mut m.idp_user_id, p.idp_user_id),
        (&mut m.name, p.name),
        (&mut m.image_url, p.image_url),
    ];
    for (field, v) in fields {
        if let Some(v) = v {
            *field = v;
        }
    }
    if let Some(team) = p.team_id {
        m.team_id = team;
    }
    sqlx::query(
        "UPDATE team_members SET email = $1, role = $2, idp_user_id = $3, name = $4, image_url = $5, \
         team_id = $6 WHERE id = $7",
    )
    .bind(&m.email)
    .bind(&m.role)
    .bind(&m.idp_user_id)
    .bind(&m.name)
    .bind(&m.image_url)
    .bind(&m.team_id)
    .bind(id)
    .execute(&mut **tx)
    .await?;
    Ok(Some(m))
}

/// False when the tenant has no such member.
pub async fn delete(store: &Store, tenant_id: &str, id: &str) -> Result<bool, StoreError> {
    TABLE.delete(store, tenant_id, id).await
}
